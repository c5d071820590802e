/*
 * encoder — what the encoder families share: the unpadded batch layout,
 * bidirectional attention over it (optionally inside a symmetric window)
 * and pooling.
 *
 * A batch is n_seq sequences laid end to end: sequence s holds rows
 * off[s] .. off[s] + len[s] - 1 (off[0] = 0, off[s + 1] = off[s] + len[s]),
 * n_rows = the sum of len.  A token attends to the tokens of its own
 * sequence only, so each sequence's result equals the one it gets alone,
 * and no work is spent on padding.
 */
#ifndef KILN_ENCODER_H
#define KILN_ENCODER_H

#include "model/family.h"

typedef struct model_enc_batch {
    int n_seq, n_rows;
    const int32_t *len; /* [n_seq] */
    int32_t *off;       /* [n_seq + 1] first row of each sequence */
    int32_t *seq;       /* [n_rows] the sequence of each row */
    int max_len;
} model_enc_batch;

/* Most sequences one encoder run of the embedder or the reranker carries
 * (bounds their per-run output buffers). */
#define MODEL_ENC_MAX_SEQ 64

/* Of the inputs order[0..n) (NULL: 0..n-1), with n_tokens[i] tokens each:
 * how many from the first go in one run of at most MODEL_ENC_MAX_SEQ
 * sequences and max_tokens tokens (at least 1, so one input over the
 * limit still runs alone). */
int32_t model_enc_run_count(const int32_t *n_tokens, const int32_t *order, int32_t n, int64_t max_tokens);

/* order[k] = the inputs begin..end-1 shortest first, ties by index (the
 * order that packs runs tightly while staying deterministic).  -1 when out
 * of memory. */
int model_enc_order_by_length(const int32_t *n_tokens, int32_t begin, int32_t end, int32_t *order);

/* Fills off and seq (caller-owned, sized as above) from len. */
void model_enc_batch_init(model_enc_batch *b, const int32_t *len, int n_seq, int32_t *off, int32_t *seq);

/* One attention call: softmax(q . k * scale) v per (row, head).  Query head
 * h reads KV head h / (n_head / n_head_kv).  Strides are in floats from
 * one row to the next; a head's hd values are contiguous. */
typedef struct model_enc_attn {
    const model_enc_batch *b;
    const float *q, *k, *v;
    int q_stride, kv_stride;
    float *out; /* [rows][n_head * hd], out_stride apart */
    int out_stride;
    int n_head, n_head_kv, hd;
    int window; /* < 0: every token; else |t - u| <= window */
    float scale;
    float *scratch; /* model_enc_attn_scratch floats */
} model_enc_attn;

/* Scratch floats model_enc_attention needs for sequences of up to max_len. */
static inline size_t model_enc_attn_scratch(const thread_pool *pool, int max_len) {
    return (size_t)thread_pool_size(pool) * (size_t)max_len;
}

void model_enc_attention(thread_pool *pool, const model_enc_attn *a);

/* Pools the rows x (stride E floats) of each sequence into out[s * E]:
 * MODEL_POOL_MEAN over its tokens, MODEL_POOL_CLS the first, MODEL_POOL_LAST the
 * last.  Sums run in double. */
void model_enc_pool(const model_enc_batch *b, const float *x, int E, int pooling, float *out);

#endif
