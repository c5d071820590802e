/* The draft-model proposer (spec.h).
 *
 * The draft has a context of its own with a sequence per target sequence,
 * the target's context length, batch size, KV cache type and threads.
 * Each draft sequence holds a prefix of its slot's tokens (held[]): at a
 * step the draft cuts it back to what still agrees with the slot (the
 * proposals the target rejected go; so does everything when another slot
 * took the sequence), feeds the rest in one batch for all the asks (in
 * chunks of its batch size when a prompt has to go in), takes the first
 * proposal from each one's last logits, and then runs one batch per
 * further proposal with every chain still going.  The last proposal is
 * never fed: the next step decides whether it is kept.
 *
 * A draft with recurrent layers (the hybrid family) cannot cut its state
 * back to an arbitrary position, so its context has twice the sequences:
 * sequence s holds only the slot's own tokens, which are never taken
 * back, and the chain runs on a disposable fork s + n_seq (kiln_seq_copy:
 * KV blocks shared, the recurrent state copied), emptied after each step.
 * Proposals the target accepts are fed to s with the next step's tokens.
 *
 * The vocabulary is checked when the draft loads: every token id both
 * models have must have the same text (special tokens rendered), the same
 * end-of-generation flag, and BOS and EOS must be the same ids.  A draft
 * with more tokens than the target never proposes the extra ones. */
#include "spec/spec.h"

#include "base/base.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct dseq {
    int32_t *held; /* [n_ctx] the tokens the draft sequence holds */
    int32_t n_held;
    spec_chain ch;
} dseq;

struct spec_draft {
    kiln_model *m;   /* the draft (owned) */
    kiln_context *c; /* its context (owned) */
    int32_t n_vocab, n_vocab_target, n_seq, n_ctx, n_batch;
    int fork; /* 1: chains run on forks (a recurrent draft) */
    float p_min;
    dseq *seqs;
    int32_t *b_tok, *b_seq;
    int8_t *b_want;
    /* per ask of the current step */
    int32_t *from;  /* next token of the slot to feed */
    int32_t *row;   /* batch row of its logits in the last decode, -1: none */
    int32_t *going; /* 1 while its chain goes on */
    int failed;     /* a draft decode failed once: logged */
};

/* 0 when the draft's vocabulary is the target's, else -1 with the first
 * difference in kiln_last_error(). */
static int vocab_check(const kiln_model *t, const kiln_model *d, const char *path) {
    kiln_model_info ti, di;
    kiln_model_get_info(t, &ti);
    kiln_model_get_info(d, &di);
    if (kiln_token_bos(t) != kiln_token_bos(d) || kiln_token_eos(t) != kiln_token_eos(d)) {
        base_fail(KILN_ERR_INVALID_ARG,
                  "the draft model %s has other special tokens than the target (BOS %d, EOS %d; the target's %d, %d)",
                  path, kiln_token_bos(d), kiln_token_eos(d), kiln_token_bos(t), kiln_token_eos(t));
        return -1;
    }
    const int32_t n = ti.n_vocab < di.n_vocab ? ti.n_vocab : di.n_vocab;
    char a[512], b[512];
    for (int32_t id = 0; id < n; id++) {
        const int la = kiln_token_to_piece(t, id, a, sizeof a, 1), lb = kiln_token_to_piece(d, id, b, sizeof b, 1);
        const int same = la == lb && (la > (int)sizeof a || !memcmp(a, b, (size_t)la));
        if (!same || kiln_token_is_eog(t, id) != kiln_token_is_eog(d, id)) {
            char qa[64], qb[64];
            snprintf(qa, sizeof qa, "%.*s", la < 40 && la >= 0 ? la : 40, a);
            snprintf(qb, sizeof qb, "%.*s", lb < 40 && lb >= 0 ? lb : 40, b);
            base_fail(KILN_ERR_INVALID_ARG,
                      "the draft model %s has another vocabulary than the target: token %d is \"%s\"%s in the target "
                      "and \"%s\"%s in the draft",
                      path, id, qa, kiln_token_is_eog(t, id) ? " (end of generation)" : "", qb,
                      kiln_token_is_eog(d, id) ? " (end of generation)" : "");
            return -1;
        }
    }
    if (ti.n_vocab != di.n_vocab)
        base_log(BASE_LOG_INFO, "draft vocabulary %d tokens, target %d: the %d they share are the same", di.n_vocab,
                 ti.n_vocab, n);
    return 0;
}

spec_draft *spec_draft_new(const kiln_spec_params *p, kiln_model *m, kiln_context *c) {
    spec_draft *d = calloc(1, sizeof *d);
    if (!d) {
        base_fail(KILN_ERR_NOMEM, "out of memory");
        return NULL;
    }
    kiln_model_params mp = kiln_model_default_params();
    char why[512];
    if (kiln_model_load(p->draft_model, &mp, &d->m) != KILN_OK) {
        snprintf(why, sizeof why, "%s", kiln_last_error());
        base_fail(KILN_ERR_INVALID_ARG, "cannot load the draft model: %s", why);
        free(d);
        return NULL;
    }
    if (vocab_check(m, d->m, p->draft_model)) {
        kiln_model_free(d->m);
        free(d);
        return NULL;
    }
    kiln_context_params cp = c->p; /* the target's, for its sequences */
    cp.embeddings = 0;
    cp.mem_limit = 0;
    kiln_model_info di, ti;
    kiln_model_get_info(d->m, &di);
    kiln_model_get_info(m, &ti);
    if (cp.n_ctx > di.n_ctx_train) cp.n_ctx = di.n_ctx_train;
    const int32_t n_seq = kiln_context_n_seq_max(c);
    kiln_status cs = kiln_context_new(d->m, &cp, &d->c);
    if (cs == KILN_OK && d->c->rs) { /* recurrent: a fork per sequence */
        kiln_context_free(d->c);
        d->c = NULL;
        cp.n_seq_max = 2 * n_seq;
        cs = kiln_context_new(d->m, &cp, &d->c);
        d->fork = 1;
    }
    if (cs == KILN_ERR_UNSUPPORTED && cp.kv_type == KILN_KV_Q8_0) { /* a head size Q8_0 cannot take */
        cp.kv_type = KILN_KV_F16;
        cs = kiln_context_new(d->m, &cp, &d->c);
    }
    if (cs != KILN_OK) {
        snprintf(why, sizeof why, "%s", kiln_last_error());
        base_fail(KILN_ERR_INVALID_ARG, "cannot make the draft model's context: %s", why);
        kiln_model_free(d->m);
        free(d);
        return NULL;
    }
    d->n_vocab = di.n_vocab;
    d->n_vocab_target = ti.n_vocab;
    d->n_seq = d->fork ? n_seq : kiln_context_n_seq_max(d->c);
    if (d->fork && kiln_context_n_seq_max(d->c) < 2 * n_seq) {
        base_fail(KILN_ERR_NOMEM, "the draft model's context cannot hold %d sequences", 2 * n_seq);
        spec_draft_free(d);
        return NULL;
    }
    d->n_ctx = kiln_context_n_ctx(d->c);
    d->n_batch = kiln_context_n_batch(d->c);
    d->p_min = p->p_min;
    d->seqs = calloc((size_t)d->n_seq, sizeof *d->seqs);
    d->b_tok = malloc((size_t)d->n_batch * sizeof *d->b_tok);
    d->b_seq = malloc((size_t)d->n_batch * sizeof *d->b_seq);
    d->b_want = malloc((size_t)d->n_batch);
    d->from = malloc((size_t)d->n_seq * sizeof *d->from);
    d->row = malloc((size_t)d->n_seq * sizeof *d->row);
    d->going = malloc((size_t)d->n_seq * sizeof *d->going);
    int ok = d->seqs && d->b_tok && d->b_seq && d->b_want && d->from && d->row && d->going;
    for (int32_t i = 0; ok && i < d->n_seq; i++)
        ok = (d->seqs[i].held = malloc((size_t)d->n_ctx * sizeof(int32_t))) != NULL;
    if (!ok) {
        base_fail(KILN_ERR_NOMEM, "out of memory for the draft model");
        spec_draft_free(d);
        return NULL;
    }
    base_log(BASE_LOG_INFO, "draft model %s: %d layers, %d tokens of context per sequence", p->draft_model, di.n_layer,
             d->n_ctx);
    return d;
}

void spec_draft_free(spec_draft *d) {
    if (!d) return;
    for (int32_t i = 0; d->seqs && i < d->n_seq; i++) {
        free(d->seqs[i].held);
        spec_chain_free(&d->seqs[i].ch);
    }
    free(d->seqs);
    free(d->b_tok);
    free(d->b_seq);
    free(d->b_want);
    free(d->from);
    free(d->row);
    free(d->going);
    kiln_context_free(d->c);
    kiln_model_free(d->m);
    free(d);
}

/* Decodes the batch built so far; on failure every chain stops and the
 * draft's sequences start over at the next step. */
static int draft_decode(spec_draft *d, int32_t n, gen_ask *asks, int32_t n_asks) {
    kiln_batch b = {n, d->b_tok, NULL, d->b_seq, d->b_want};
    if (kiln_decode(d->c, &b) == KILN_OK) return 0;
    if (!d->failed)
        base_log(BASE_LOG_WARN, "the draft model's decode failed (%s); no proposals", kiln_context_error(d->c));
    d->failed = 1;
    for (int32_t a = 0; a < n_asks; a++) {
        d->going[a] = 0;
        asks[a].n = 0;
        kiln_seq_truncate(d->c, asks[a].seq, 0);
        if (d->fork) kiln_seq_truncate(d->c, asks[a].seq + d->n_seq, 0);
        d->seqs[asks[a].seq].n_held = 0;
    }
    return -1;
}

/* Proposal i of ask a from the row of the last decode; 1 when the chain
 * goes on after it. */
static int take(spec_draft *d, gen_ask *k, int32_t a, int32_t i) {
    dseq *q = &d->seqs[k->seq];
    const int32_t id = spec_chain_pick(&q->ch, i, kiln_get_logits(d->c, d->row[a]), d->p_min);
    if (id < 0 || id >= d->n_vocab_target) return 0;
    k->draft[i] = id;
    k->n = i + 1;
    /* an end of generation ends the text: nothing can follow it */
    const int32_t len = d->fork ? q->n_held + k->n - 1 : q->n_held; /* what feeding it would make */
    return k->n < k->max && !kiln_token_is_eog(d->m, id) && len < d->n_ctx;
}

void spec_draft_propose(void *self, gen_ask *asks, int32_t n_asks) {
    spec_draft *d = self;
    if (n_asks > d->n_seq) n_asks = d->n_seq;
    /* cut each draft sequence back to what agrees with its slot */
    for (int32_t a = 0; a < n_asks; a++) {
        gen_ask *k = &asks[a];
        k->n = 0;
        k->dist = NULL;
        d->going[a] = 0;
        d->row[a] = -1;
        if (k->seq < 0 || k->seq >= d->n_seq || k->n_tok > d->n_ctx) continue;
        dseq *q = &d->seqs[k->seq];
        if (spec_chain_begin(&q->ch, k->sampler, d->n_vocab)) continue;
        int32_t lcp = q->n_held < k->n_tok - 1 ? q->n_held : k->n_tok - 1; /* the last token is always fed */
        for (int32_t i = 0; i < lcp; i++)
            if (q->held[i] != k->tok[i]) {
                lcp = i;
                break;
            }
        if (lcp < q->n_held) { /* a recurrent state goes back to a snapshot at or before lcp */
            const int32_t at = kiln_seq_truncate_point(d->c, k->seq, lcp);
            lcp = at >= 0 && kiln_seq_truncate(d->c, k->seq, at) == KILN_OK ? at : 0;
            if (lcp == 0) kiln_seq_truncate(d->c, k->seq, 0);
        }
        q->n_held = lcp;
        d->from[a] = lcp;
        d->going[a] = 1;
    }
    /* feed what each is missing, in chunks; the first proposal comes from
     * the logits of its last token, taken right after the batch holding it */
    for (;;) {
        int32_t n = 0;
        for (int32_t a = 0; a < n_asks && n < d->n_batch; a++) {
            gen_ask *k = &asks[a];
            if (!d->going[a] || d->from[a] >= k->n_tok) continue;
            dseq *q = &d->seqs[k->seq];
            int32_t take_n = k->n_tok - d->from[a];
            if (take_n > d->n_batch - n) take_n = d->n_batch - n;
            for (int32_t i = 0; i < take_n; i++) {
                d->b_tok[n + i] = k->tok[d->from[a] + i];
                d->b_seq[n + i] = k->seq;
                d->b_want[n + i] = 0;
            }
            memcpy(q->held + q->n_held, k->tok + d->from[a], (size_t)take_n * sizeof(int32_t));
            q->n_held += take_n;
            d->from[a] += take_n;
            n += take_n;
            d->row[a] = -1;
            if (d->from[a] == k->n_tok) {
                d->b_want[n - 1] = 1;
                d->row[a] = n - 1;
            }
        }
        if (n == 0) break;
        if (draft_decode(d, n, asks, n_asks)) return;
        for (int32_t a = 0; a < n_asks; a++)
            if (d->going[a] && d->row[a] >= 0 && d->from[a] == asks[a].n_tok) {
                d->going[a] = take(d, &asks[a], a, 0);
                d->row[a] = -1;
                d->from[a] = asks[a].n_tok + 1; /* done feeding */
            }
    }
    /* one batch per further proposal: each chain feeds its latest (to the
     * sequence itself, or to its fork, made from it at the first) */
    for (int32_t i = 1; i < GEN_DRAFT_MAX; i++) {
        int32_t n = 0;
        for (int32_t a = 0; a < n_asks; a++) {
            gen_ask *k = &asks[a];
            if (!d->going[a] || k->n != i) {
                d->going[a] = 0;
                continue;
            }
            dseq *q = &d->seqs[k->seq];
            if (d->fork && i == 1 && kiln_seq_copy(d->c, k->seq, k->seq + d->n_seq) != KILN_OK) {
                d->going[a] = 0;
                continue;
            }
            d->b_tok[n] = k->draft[i - 1];
            d->b_seq[n] = d->fork ? k->seq + d->n_seq : k->seq;
            d->b_want[n] = 1;
            if (!d->fork) q->held[q->n_held++] = k->draft[i - 1];
            d->row[a] = n++;
        }
        if (n == 0) break;
        if (draft_decode(d, n, asks, n_asks)) return;
        for (int32_t a = 0; a < n_asks; a++)
            if (d->going[a]) d->going[a] = take(d, &asks[a], a, i);
    }
    for (int32_t a = 0; a < n_asks; a++) {
        if (asks[a].n > 0 && spec_chain_drawn(&d->seqs[asks[a].seq].ch)) asks[a].dist = d->seqs[asks[a].seq].ch.dist;
        if (d->fork && asks[a].seq >= 0 && asks[a].seq < d->n_seq) kiln_seq_truncate(d->c, asks[a].seq + d->n_seq, 0);
    }
}
