/*
 * moe — the mixture-of-experts FFN the decoder families share (hybrid.c's
 * qwen35moe and qwen3next, dense.c's qwen3moe, nemotron.c's
 * nemotron_h_moe):
 *
 *   out = sum_i w_i down_i(silu(gate_i xn) * up_i xn)
 *         [+ sigmoid(shexp_gate . xn) * shared(xn)  when the layer has a shared expert;
 *          + shared(xn) when it is ungated]
 *
 * with w the top k of the softmax over the router's logits, renormalized to
 * sum 1 (unless w_norm is 0), times expert_weights_scale where the file sets
 * one (kern_moe_route); with sigmoid gating, a selection bias or expert groups
 * (DeepSeek-V3) kern_moe_route_sel's choice.
 * Variants (model_moe_hp's gating and act, the layer's biases): the softmax
 * over the k largest logits only; a clamped SwiGLU; ungated relu^2
 * experts (nemotron_h_moe); biases on the
 * router's logits and on each expert's three products (down's before the
 * weighting).
 * Only the selected experts' rows are read.  A family binds a layer's MoE
 * tensors with model_moe_bind, sizes its activations with model_moe_ws_init and
 * runs the FFN with model_moe_ffn.
 */
#ifndef KILN_MOE_H
#define KILN_MOE_H

#include "model/model.h"

/* How a token's expert weights come from the router's logits, and an
 * expert's activation between its gate/up and down products (backend.h). */
enum model_moe_gating {
    MODEL_MOE_SOFTMAX = BACKEND_MOE_SOFTMAX,           /* softmax over all, top k, renormalized to sum 1 */
    MODEL_MOE_TOPK_SOFTMAX = BACKEND_MOE_TOPK_SOFTMAX, /* top k logits, softmax over just those k */
};
enum model_moe_act {
    MODEL_MOE_SWIGLU = BACKEND_MOE_SWIGLU,         /* silu(g) * u */
    MODEL_MOE_SWIGLU_OAI = BACKEND_MOE_SWIGLU_OAI, /* the clamped SwiGLU kern_swiglu_oai, alpha 1.702, limit 7 */
    MODEL_MOE_RELU2 = BACKEND_MOE_RELU2,           /* relu(u)^2, no gate (ffn_up_exps alone; the shared expert too) */
};

/* The experts' hyperparameters ({arch}.expert_* keys; gating and act are
 * the family's to set, MODEL_MOE_SOFTMAX / MODEL_MOE_SWIGLU after reading) and
 * one layer's MoE tensors: the router and per-expert views of the 3-D
 * expert tensors, the shared expert's data NULL when the layer has none
 * (backend.h). */
typedef backend_moe_hp model_moe_hp;
typedef backend_moe_layer model_moe_layer;

/* The FFN's activations, the backend's memory. */
typedef struct model_moe_ws {
    void *p;
} model_moe_ws;

/* Reads expert_count, expert_used_count, expert_feed_forward_length,
 * expert_shared_feed_forward_length, expert_weights_scale,
 * expert_gating_func (1 softmax, 2 sigmoid) and the expert groups; w_norm
 * 1, sh_ungated 0, probs_b 0.  No expert_count leaves h zeroed.
 * A failure is a status with the last error set. */
kiln_status model_moe_read_hparams(const kiln_model *m, model_moe_hp *h);
/* Binds layer il's ffn_gate_inp, ffn_{gate,up}_exps (or the fused
 * ffn_gate_up_exps), ffn_down_exps and, when present, their .bias tensors
 * (not with the fused one) and the shared expert;
 * views holds 3 * n_expert matrices the layer keeps pointing into. */
void model_moe_bind(model_binder *B, const kiln_model *m, const model_moe_hp *h, int il, model_moe_layer *l,
                    kern_mat *views);
/* Appends the layer's matrices and vectors to the repack list. */
void model_moe_weights(const kiln_model *m, const model_moe_hp *h, model_moe_layer *l, model_weights *w);
/* The tensor bytes a decode step reads when 3-D tensors are expert stacks
 * of which it reads n_used of n_expert; tensors of layers >= n_layer
 * (blocks that do not run) are left out. */
uint64_t model_moe_active_bytes(const kiln_model *m, const model_moe_hp *h, int n_layer);

/* Allocates the activations for n_batch tokens on c's backend; -1 when
 * out of memory. */
int model_moe_ws_init(kiln_context *c, model_moe_ws *w, const model_moe_hp *h, int n_embd, int n_batch);
void model_moe_ws_free(kiln_context *c, model_moe_ws *w);
/* Rows and widest input of the products model_moe_ffn runs, for sizing the
 * context's matmul scratch. */
int model_moe_mm_rows(const model_moe_hp *h, int n_batch);
int64_t model_moe_mm_cols(const model_moe_hp *h);

/* The FFN of n tokens on c's backend: xn [n][n_embd] in (overwritten: it
 * serves as the accumulator), y [n][n_embd] out. */
void model_moe_ffn(kiln_context *c, const model_moe_hp *h, const model_moe_layer *L, model_moe_ws *w, float *xn,
                   float *y, int n);

#endif
