/*
 * bert — the encoder architecture (general.architecture "bert", llama.cpp
 * tensor names and keys).  Per token row of n_embd:
 *
 *   x = LN(tok[id] + type[0] + pos[t])                       token_embd_norm
 *   per layer, post-norm:
 *     x = LN(x + O(attn(Qx + bq, Kx + bk, Vx + bv)) + bo)    attn_output_norm
 *     x = LN(x + down(gelu(up x + b_up)) + b_down)           layer_output_norm
 *
 * Attention is bidirectional over the real tokens of the row's own
 * sequence; padding rows are never attended to.  GELU is the tanh
 * approximation ggml_gelu uses (kk_gelu).  LayerNorm epsilon comes from
 * bert.attention.layer_norm_epsilon.
 */
#ifndef KILN_BERT_H
#define KILN_BERT_H

#include "model/model.h"

#include <stddef.h>

typedef struct kl_bert_layer {
    kk_mat wq, wk, wv, wo;              /* n_embd -> n_embd */
    const float *bq, *bk, *bv, *bo;     /* [n_embd] */
    const float *ln_attn_w, *ln_attn_b; /* attn_output_norm [n_embd] */
    kk_mat w_up, w_down;                /* n_embd -> n_ff -> n_embd */
    const float *b_up, *b_down;         /* [n_ff], [n_embd] */
    const float *ln_out_w, *ln_out_b;   /* layer_output_norm [n_embd] */
} kl_bert_layer;

struct kl_bert {
    kk_mat pos_embd;              /* [n_pos rows of n_embd] */
    kk_mat type_embd;             /* [n_types rows]; data NULL when absent */
    const float *emb_norm_w, *emb_norm_b;
    float eps;                    /* LayerNorm epsilon */
    int n_pos;                    /* longest input the positions allow */
    kl_bert_layer *layers;
};

/* Reads the encoder's hyperparameters and binds every tensor with its
 * shape checked (m->hp from the common loader is already filled).  Sets
 * m->bert and m->hp.n_vocab.  Returns -1 with one line in err. */
int kl_bert_bind(kiln_model *m, char *err, size_t errlen);
void kl_bert_free(struct kl_bert *b);

/* Activations for up to cap_tok token rows (sequences x padded length),
 * sized once; the forward allocates nothing. */
typedef struct kl_bert_ws kl_bert_ws;
kl_bert_ws *kl_bert_ws_new(const kiln_model *m, int cap_tok, kpool *pool);
void kl_bert_ws_free(kl_bert_ws *w);

/* Runs n_seq sequences padded on the right to T tokens: tokens[s * T + t]
 * for t < len[s] are real, the rest padding (ignored).  Writes each
 * sequence's pooled final hidden state (KILN_POOLING_MEAN, _CLS or _LAST;
 * not normalized) to out[s * n_embd].  Needs n_seq * T <= cap_tok and
 * 1 <= len[s] <= min(T, n_pos). */
void kl_bert_forward(kl_bert_ws *w, const kiln_model *m, const int32_t *tokens, const int32_t *len, int n_seq,
                     int T, int pooling, float *out);

#endif
