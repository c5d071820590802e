/* The MTP proposer (spec.h): the target's own NextN block (model/mtp.h),
 * run on the target's context, which keeps its cache.
 *
 * For an ask whose sequence holds tok[0..n_tok - 1), the first step pairs
 * the target's hidden state at position n_tok - 2 with tok[n_tok - 1] (the
 * token the verify pass feeds first, at position n_tok - 1) and proposes
 * the token after it; each further step pairs the block's own output h'
 * with the proposal before.  One model_mtp_step per proposal position carries
 * every chain still going.  The cells a chain writes past the sequence's
 * length are written again from the target's hidden states by the verify
 * pass before anything reads them, and the rejected ones go with the
 * sequence's truncation, so a proposal leaves no trace.
 *
 * Greedy slots get the block's argmax, sampling slots a token drawn from
 * its distribution under the slot's cuts (spec_chain). */
#include "spec/spec.h"

#include "base/base.h"
#include "model/mtp.h"

#include <stdlib.h>

struct spec_mtp {
    kiln_model *m;   /* the target (borrowed) */
    kiln_context *c; /* its context (borrowed) */
    int32_t n_seq, n_vocab, n_ctx;
    int32_t n_rows; /* most rows one step carries: sequences, at most the batch */
    float p_min;
    spec_chain *ch; /* [n_seq] */
    /* the rows of the current step */
    int32_t *r_seq, *r_pos, *r_tok, *r_ask;
    uint8_t *r_chain;
    int failed; /* a step failed once: logged */
};

spec_mtp *spec_mtp_new(const kiln_spec_params *p, kiln_model *m, kiln_context *c) {
    if (model_mtp_blocks(m) <= 0) {
        base_fail(KILN_ERR_UNSUPPORTED, "%s has no MTP (nextn) blocks to propose with", m->arch_name);
        return NULL;
    }
    if (!model_mtp_on(c)) {
        base_fail(KILN_ERR_UNSUPPORTED, "the context keeps no MTP cache (make it with kiln_context_params.mtp = 1)");
        return NULL;
    }
    spec_mtp *t = calloc(1, sizeof *t);
    if (!t) {
        base_fail(KILN_ERR_NOMEM, "out of memory");
        return NULL;
    }
    kiln_model_info info;
    kiln_model_get_info(m, &info);
    t->m = m;
    t->c = c;
    t->n_seq = kiln_context_n_seq_max(c);
    t->n_vocab = info.n_vocab;
    t->n_ctx = kiln_context_n_ctx(c);
    t->n_rows = t->n_seq < kiln_context_n_batch(c) ? t->n_seq : kiln_context_n_batch(c);
    t->p_min = p->p_min;
    const size_t n = (size_t)t->n_seq;
    t->ch = calloc(n, sizeof *t->ch);
    t->r_seq = malloc(n * sizeof(int32_t));
    t->r_pos = malloc(n * sizeof(int32_t));
    t->r_tok = malloc(n * sizeof(int32_t));
    t->r_ask = malloc(n * sizeof(int32_t));
    t->r_chain = malloc(n);
    if (!t->ch || !t->r_seq || !t->r_pos || !t->r_tok || !t->r_ask || !t->r_chain) {
        spec_mtp_free(t);
        base_fail(KILN_ERR_NOMEM, "out of memory for the MTP proposer");
        return NULL;
    }
    return t;
}

void spec_mtp_free(spec_mtp *t) {
    if (!t) return;
    for (int32_t i = 0; t->ch && i < t->n_seq; i++) spec_chain_free(&t->ch[i]);
    free(t->ch);
    free(t->r_seq);
    free(t->r_pos);
    free(t->r_tok);
    free(t->r_ask);
    free(t->r_chain);
    free(t);
}

void spec_mtp_propose(void *self, gen_ask *asks, int32_t n_asks) {
    spec_mtp *t = self;
    kiln_context *c = t->c;
    int32_t nr = 0;
    for (int32_t a = 0; a < n_asks; a++) {
        gen_ask *k = &asks[a];
        k->n = 0;
        k->dist = NULL;
        const int32_t pos = k->n_tok - 1; /* where tok[n_tok - 1] goes */
        if (k->seq < 0 || k->seq >= t->n_seq || pos < 0 || pos + 1 >= t->n_ctx || nr >= t->n_rows) continue;
        if (kiln_seq_len(c, k->seq) != pos || !model_mtp_ready(c, k->seq, pos)) continue;
        if (spec_chain_begin(&t->ch[k->seq], k->sampler, t->n_vocab)) continue;
        t->r_seq[nr] = k->seq;
        t->r_pos[nr] = pos;
        t->r_tok[nr] = k->tok[pos];
        t->r_chain[nr] = 0;
        t->r_ask[nr++] = a;
    }
    for (int32_t i = 0; nr > 0 && i < GEN_DRAFT_MAX; i++) {
        if (model_mtp_step(c, nr, t->r_seq, t->r_pos, t->r_tok, t->r_chain) != KILN_OK) {
            if (!t->failed) base_log(BASE_LOG_WARN, "the MTP step failed (%s); no proposals", kiln_context_error(c));
            t->failed = 1;
            break;
        }
        int32_t keep = 0;
        for (int32_t r = 0; r < nr; r++) {
            gen_ask *k = &asks[t->r_ask[r]];
            const int32_t id = spec_chain_pick(&t->ch[k->seq], i, model_mtp_logits(c, r), t->p_min);
            if (id < 0) continue;
            k->draft[i] = id;
            k->n = i + 1;
            /* an end of generation ends the text; the next proposal would
             * go in at r_pos + 2, which must stay inside the context */
            if (k->n >= k->max || kiln_token_is_eog(t->m, id) || t->r_pos[r] + 2 >= t->n_ctx) continue;
            t->r_seq[keep] = t->r_seq[r];
            t->r_pos[keep] = t->r_pos[r] + 1;
            t->r_tok[keep] = id;
            t->r_chain[keep] = 1;
            t->r_ask[keep++] = t->r_ask[r];
        }
        nr = keep;
    }
    for (int32_t a = 0; a < n_asks; a++)
        if (asks[a].n > 0 && spec_chain_drawn(&t->ch[asks[a].seq])) asks[a].dist = t->ch[asks[a].seq].dist;
}
