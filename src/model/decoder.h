/*
 * decoder — what the decoder families (dense.c, hybrid.c) share: resolving
 * a batch's sequences and positions, attention over the paged KV cache of
 * an attention layer, and the output head, all on the context's backend
 * (c->bx, backend/backend.h).  A family's forward calls
 *
 *   model_attn_prepare           once per batch (RoPE tables, attention tiles:
 *                             the step's host metadata, handed to the backend)
 *   model_attn_store / _run      per attention layer, by its ordinal (or the
 *                             backend's qk_store / attn ops directly)
 *   model_batch_commit           once the layers ran (the sequences grow)
 *   model_batch_output           the final norm and the logits
 *
 * after api.c's model_batch_begin checked the batch; the model's backend runs
 * every op.
 */
#ifndef KILN_DECODER_H
#define KILN_DECODER_H

#include "model/context.h"

/* Checks batch b against the context before any compute (ids, sequences,
 * positions, room in the context and in the KV cache) and resolves each
 * token's sequence and position into c->b_seq / c->b_pos and its logits
 * row into c->out_idx (-1: none); *n_out counts the rows. */
kiln_status model_batch_begin(kiln_context *c, const kiln_batch *b, int *n_out);
/* Recurrent families, which run a sequence's tokens in order: orders the
 * batch's n tokens by sequence (stable, so positions stay increasing).
 * ord [n] gets the batch index of each row in run order, c->b_seq and
 * c->b_pos are permuted to match, run [n + 1] gets the row where each run
 * of one sequence starts (*n_run runs, run[*n_run] = n); tmp [n] is
 * scratch.  Returns 1 when the order changed (model_batch_seq_restore puts
 * b_seq and b_pos back). */
int model_batch_seq_runs(kiln_context *c, int n, int32_t *ord, int32_t *tmp, int32_t *run, int *n_run);
void model_batch_seq_restore(kiln_context *c, int n, const int32_t *ord, int32_t *tmp);
/* The batch's n tokens are now held by their sequences. */
void model_batch_commit(kiln_context *c, int n);
/* Rows x[i] (n_embd floats, i < n) of the tokens that asked for logits:
 * output norm into c->out_rows, then logits (unless an embeddings context). */
void model_batch_output(kiln_context *c, const float *x, int n, int n_out);

/* A model split between the GPU and the CPU (kiln_model.be_lo): a forward
 * runs the embeddings and layers below gpu_l0 with the host part's bx and
 * ws swapped in, then swaps back for the GPU's layers (one upload of the
 * residual rows), and swaps again for the output head (one download):
 *
 *   l0 = model_split_enter(c)        -1 unsplit; else gpu_l0, the host part in
 *   at layer l0: x_host = ws's x; model_split_swap(c); upload into the new ws
 *   after the layers: x_dev = ws's x; model_split_swap(c); download
 *   model_batch_output; model_split_swap(c)   (at rest bx and ws are the GPU's)
 *
 * An attention layer's ordinal on the part bx runs is less c->attn_base. */
void model_split_swap(kiln_context *c);
int model_split_enter(kiln_context *c);

/* RoPE tables of the n batch positions (c->rope_cs, with the model's
 * hp.rope) and the attention tiles (c->b_tile): runs of up to MODEL_ATTN_TILE
 * tokens of one sequence at consecutive positions that read K and V once. */
void model_attn_prepare(kiln_context *c, int n);
/* Token i's keys and values (n_head_kv rows of hd floats each) into the
 * cache of attention layer ord, in the cache's type (backend_ops.kv_store; v
 * unread when the cache keeps V in K). */
void model_attn_store(kiln_context *c, int ord, int i, const float *k, const float *v);
/* Causal attention of every batch token over its sequence's cached
 * positions 0..pos in attention layer ord: q and out are [n][n_head * hd],
 * heads sharing a KV head by groups of n_head / n_head_kv.  With V in K,
 * out is the weighted sum of whole K rows: its first elements are the
 * value part. */
void model_attn_run(kiln_context *c, int ord, const float *q, float *out, int n);

/* A layer's departures from model_attn_run's attention (zero: none):
 * window > 0, a sliding window (the query at position p sees only
 * p - window + 1 .. p; every position stays cached); scale, the score
 * scale (0: 1 / sqrt(head size)); sinks, [n_head] attention sinks (each
 * head's softmax gets one more logit, not scaled, that adds no value:
 * kern_attn_inv; NULL: none). */
typedef backend_attn_opts model_attn_opts;
/* model_attn_run with o's departures (o may be NULL). */
void model_attn_run_opts(kiln_context *c, int ord, const float *q, float *out, int n, const model_attn_opts *o);

#endif
