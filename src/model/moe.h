/*
 * moe — the mixture-of-experts FFN the decoder families share (hybrid.c's
 * qwen35moe and qwen3next, dense.c's qwen3moe):
 *
 *   out = sum_i w_i down_i(silu(gate_i xn) * up_i xn)
 *         [+ sigmoid(shexp_gate . xn) * shared(xn)  when the layer has a shared expert]
 *
 * with w the top k of the softmax over the router's logits, renormalized to
 * sum 1, times expert_weights_scale where the file sets one (kk_moe_route).
 * Only the selected experts' rows are read.  A family binds a layer's MoE
 * tensors with kl_moe_bind, sizes its activations with kl_moe_ws_init and
 * runs the FFN with kl_moe_ffn.
 */
#ifndef KILN_MOE_H
#define KILN_MOE_H

#include "model/model.h"

/* The experts' hyperparameters ({arch}.expert_* keys) and one layer's
 * MoE tensors: the router and per-expert views of the 3-D expert tensors,
 * the shared expert's data NULL when the layer has none (backend.h). */
typedef kbe_moe_hp kl_moe_hp;
typedef kbe_moe_layer kl_moe_layer;

/* The FFN's activations, the backend's memory. */
typedef struct kl_moe_ws {
    void *p;
} kl_moe_ws;

/* Reads expert_count, expert_used_count, expert_feed_forward_length,
 * expert_shared_feed_forward_length, expert_weights_scale and checks
 * expert_gating_func (softmax only).  No expert_count leaves h zeroed.
 * -1 with one line in err. */
int kl_moe_read_hparams(const kiln_model *m, kl_moe_hp *h, char *err, size_t errlen);
/* Binds layer il's ffn_gate_inp, ffn_{gate,up}_exps (or the fused
 * ffn_gate_up_exps), ffn_down_exps and, when present, the shared expert;
 * views holds 3 * n_expert matrices the layer keeps pointing into. */
void kl_moe_bind(kl_binder *B, const kiln_model *m, const kl_moe_hp *h, int il, kl_moe_layer *l, kk_mat *views);
/* Appends the layer's matrices and vectors to the repack list. */
void kl_moe_weights(const kiln_model *m, const kl_moe_hp *h, kl_moe_layer *l, kl_weights *w);
/* The tensor bytes a decode step reads when 3-D tensors are expert stacks
 * of which it reads n_used of n_expert; tensors of layers >= n_layer
 * (blocks that do not run) are left out. */
uint64_t kl_moe_active_bytes(const kiln_model *m, const kl_moe_hp *h, int n_layer);

/* Allocates the activations for n_batch tokens on c's backend; -1 when
 * out of memory. */
int kl_moe_ws_init(kiln_context *c, kl_moe_ws *w, const kl_moe_hp *h, int n_embd, int n_batch);
void kl_moe_ws_free(kiln_context *c, kl_moe_ws *w);
/* Rows and widest input of the products kl_moe_ffn runs, for sizing the
 * context's matmul scratch. */
int kl_moe_mm_rows(const kl_moe_hp *h, int n_batch);
int64_t kl_moe_mm_cols(const kl_moe_hp *h);

/* The FFN of n tokens on c's backend: xn [n][n_embd] in (overwritten: it
 * serves as the accumulator), y [n][n_embd] out. */
void kl_moe_ffn(kiln_context *c, const kl_moe_hp *h, const kl_moe_layer *L, kl_moe_ws *w, float *xn, float *y, int n);

#endif
