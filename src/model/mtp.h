/*
 * mtp — the multi-token-prediction (NextN) block of a decoder, as the
 * speculative proposer (spec/mtp.c) runs it on the target's own context.
 *
 * The block predicts token t + 2 from the target's final hidden state at
 * position t (after the output norm) and the embedding of token t + 1:
 *
 *   x  = eh_proj [rms(emb(tok_{t+1})) * enorm | rms(h_t) * hnorm]   (2 n_embd -> n_embd)
 *   x  = one decoder block (full attention over the block's own KV cache, FFN)
 *   h' = rms(x) * head_norm;   logits = head h'
 *
 * and chains: h' stands in for h_{t+1} with the token it proposed.
 *
 * Its KV cache is one more attention layer of the context's paged cache
 * (kiln_context_params.mtp), so it is truncated, forked, reused and
 * counted in the memory budget with the target's layers.  Cell p holds the
 * block's keys and values for the pair (h_{p-1}, tok_p) (cell 0: a zero
 * hidden state), so it depends on tokens 0..p only, like the target's
 * cells, and a prefix block shared by its tokens is right for the MTP
 * layer too.  Every forward pass of the target fills the cells of the
 * tokens it feeds (the keys and values only: the pairs of a run of tokens
 * at a..b are (h_{a-1}, tok_a) .. (h_{b-1}, tok_b), h_{a-1} kept from the
 * sequence's previous pass), which is what makes the cache hold the
 * target's hidden states at every accepted position: a proposal chain
 * writes cells past the sequence's length with its own h', and the verify
 * pass that follows writes them again from the target's, before the
 * rejected ones are cut with the sequence.  After a prefix-cache hit the
 * first recomputed cell pairs a zero hidden state (the target's at the
 * position before is not known); that only weakens a proposal.
 */
#ifndef KILN_MTP_H
#define KILN_MTP_H

#include "model/context.h"

/* Rows of the target's final hidden states kept per sequence: its last
 * run's, at most this many (a verify run's length). */
#define MODEL_MTP_KEEP 17

/* MTP blocks m can run (0: none). */
int model_mtp_blocks(const kiln_model *m);
/* 1 when c keeps the MTP cache. */
int model_mtp_on(const kiln_context *c);
/* 1 when a step of seq at cell pos can start from the target: the
 * target's hidden state at pos - 1 is kept (pos 0: always). */
int model_mtp_ready(const kiln_context *c, int32_t seq, int32_t pos);

/* One MTP step over n rows (n <= n_seq_max, distinct sequences): row r
 * writes cell pos[r] of sequence seq[r] for token tok[r] (pos[r] >= the
 * sequence's length - 1, < n_ctx; the cells past its length are reserved
 * and go when it is truncated) from the target's hidden state at pos[r] - 1
 * (chain[r] 0) or the sequence's previous step's h' (chain[r] 1), and
 * leaves the logits for the token at pos[r] + 1 in model_mtp_logits(c, r).
 * Fails (KILN_ERR_CONTEXT_FULL) when the cache has no block left. */
kiln_status model_mtp_step(kiln_context *c, int n, const int32_t *seq, const int32_t *pos, const int32_t *tok,
                           const uint8_t *chain);
const float *model_mtp_logits(const kiln_context *c, int r);

/* ---- for the families ---- */

/* The kept hidden state of seq at pos (n_embd floats), NULL when not kept. */
const float *model_mtp_hidden(const kiln_context *c, int32_t seq, int32_t pos);
/* Keeps rows[0..n) (n_embd floats each, at positions pos0..) as seq's,
 * the last MODEL_MTP_KEEP of them. */
void model_mtp_keep(kiln_context *c, int32_t seq, int32_t pos0, const float *rows, int32_t n);

#endif
