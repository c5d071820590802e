/*
 * t5 — the T5 encoder as Flan-T5 runs it, from the Hugging Face
 * safetensors layout (shared.weight or encoder.embed_tokens.weight,
 * encoder.block.N.layer.{0,1}..., encoder.final_layer_norm.weight).
 *
 * Per block: h += o(attn(rms(h) * ln0)), attention without scaling plus a
 * learned bias per head indexed by the bidirectional relative position
 * bucket (block 0's table, shared by all blocks); h += wo(gelu(wi_0 x) *
 * wi_1 x) with x = rms(h) * ln1 (gated-GELU, tanh approximation).  The
 * norm is RMS without mean or bias, eps 1e-6.  Sizes come from the
 * tensors; the bucket count from the bias table, the maximum distance
 * from the pack (128 for every T5).
 */
#ifndef KILN_IMAGE_T5_H
#define KILN_IMAGE_T5_H

#include "image/nn.h"

typedef struct image_t5_block {
    float *ln0, *ln1;
    image_lin q, k, v, o, wi0, wi1, wo;
} image_t5_block;

typedef struct image_t5 {
    int n_vocab, d_model, heads, d_kv, d_ff, layers, buckets, max_distance;
    kern_mat emb;    /* [n_vocab][d_model], mapped */
    float *rel_bias; /* [buckets][heads] */
    image_t5_block *blk;
    float *final_ln;
} image_t5;

/* Infers the sizes from f and binds every tensor; with check set it only
 * verifies (no allocation; m receives the sizes).  0 or -1 with err. */
int image_t5_bind(image_t5 *m, const ckpt_file *f, const char *what, int max_distance, int check, char *err,
                  size_t errlen);
void image_t5_free(image_t5 *m);
/* out [n][d_model] = encoder states of ids[0..n).  Returns -1 (err set)
 * for an id outside the vocabulary or when out of memory. */
int image_t5_encode(const image_t5 *m, thread_pool *pool, const int32_t *ids, int n, float *out, char *err,
                    size_t errlen);
/* The bucket of relative position rel = key - query, as transformers
 * computes it (float32 logarithms, truncation). */
int image_t5_bucket(int rel, int buckets, int max_distance);

#endif
