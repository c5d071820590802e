/*
 * moe — the mixture-of-experts FFN the decoder families share (hybrid.c's
 * qwen35moe and qwen3next, dense.c's qwen3moe):
 *
 *   out = sum_i w_i down_i(silu(gate_i xn) * up_i xn)
 *         [+ sigmoid(shexp_gate . xn) * shared(xn)  when the layer has a shared expert;
 *          + shared(xn) when it is ungated]
 *
 * with w the top k of the softmax over the router's logits, renormalized to
 * sum 1 (unless w_norm is 0), times expert_weights_scale where the file sets
 * one (kk_moe_route); with sigmoid gating, a selection bias or expert groups
 * (DeepSeek-V3) kk_moe_route_sel's choice.
 * Variants (kl_moe_hp's gating and act, the layer's biases): the softmax
 * over the k largest logits only; a clamped SwiGLU; biases on the
 * router's logits and on each expert's three products (down's before the
 * weighting).
 * Only the selected experts' rows are read.  A family binds a layer's MoE
 * tensors with kl_moe_bind, sizes its activations with kl_moe_ws_init and
 * runs the FFN with kl_moe_ffn.
 */
#ifndef KILN_MOE_H
#define KILN_MOE_H

#include "model/model.h"

/* How a token's expert weights come from the router's logits. */
enum kl_moe_gating {
    KL_MOE_SOFTMAX,      /* softmax over all, top k, renormalized to sum 1 */
    KL_MOE_TOPK_SOFTMAX, /* top k logits, softmax over just those k */
};
/* An expert's activation between its gate/up and down products. */
enum kl_moe_act {
    KL_MOE_SWIGLU,     /* silu(g) * u */
    KL_MOE_SWIGLU_OAI, /* the clamped SwiGLU kk_swiglu_oai, alpha 1.702, limit 7 */
};

/* The experts' hyperparameters ({arch}.expert_* keys; gating and act are
 * the family's to set, KL_MOE_SOFTMAX / KL_MOE_SWIGLU after reading). */
typedef struct kl_moe_hp {
    int n_expert, n_used;      /* experts, experts per token (0, 0: no MoE layers) */
    int F_exp, F_sh;           /* an expert's width, the shared expert's */
    float w_scale;             /* expert_weights_scale (0 or 1: none) */
    int w_norm;                /* 1 (kl_moe_read_hparams' default): the top k weights renormalized */
    int sh_ungated;            /* 1: the shared expert is added as is (no ffn_gate_inp_shexp) */
    int sigmoid;               /* expert_gating_func 2: sigmoid probabilities instead of the softmax */
    int n_group, n_group_used; /* expert_group_count / _used_count: choose within the best groups */
    int probs_b;               /* 1 (the family's choice): layers may carry exp_probs_b, a selection bias */
    int gating, act;           /* enum kl_moe_gating, enum kl_moe_act */
} kl_moe_hp;

/* One layer's MoE tensors: the router and per-expert views of the 3-D
 * expert tensors; the shared expert's data NULL when the layer has none. */
typedef struct kl_moe_layer {
    kk_mat router;                  /* n_embd -> n_expert, F32 */
    kk_mat *e_gate, *e_up, *e_down; /* [n_expert] views */
    kk_mat s_gate, s_up, s_down;    /* shared expert */
    const float *s_gate_inp;        /* [n_embd]: the shared expert's gate; NULL: ungated */
    const float *sel_bias;          /* [n_expert] exp_probs_b; NULL: none */
    /* biases, NULL where the file has none: the router's [n_expert], the
     * experts' gate and up [n_expert][F_exp] and down [n_expert][n_embd] */
    const float *router_b, *b_gate, *b_up, *b_down;
} kl_moe_layer;

/* Activations for n_batch tokens (per token row; the routed rows grouped
 * by expert). */
typedef struct kl_moe_ws {
    float *router, *sgl;      /* [n][n_expert] logits, [n] shared gate logit */
    int32_t *sel;             /* [n][k] experts per token */
    float *selw;              /* [n][k] their weights */
    float *rsel;              /* [n_expert] routing scratch */
    int32_t *row_of;          /* [n][k] the (token, slot)'s row in the grouped arrays */
    float *mx, *mg, *mu, *md; /* [n * k][n_embd] / [n * k][F_exp] x2 / [n * k][n_embd] */
    float *sg, *su;           /* [n][F_sh] */
    int32_t *e_count, *e_off; /* [n_expert] */
    kk_mm_out *outs;          /* [2 * n_expert] products over row ranges, */
    int32_t *out_t0, *out_nt; /* and those ranges */
} kl_moe_ws;

/* Reads expert_count, expert_used_count, expert_feed_forward_length,
 * expert_shared_feed_forward_length, expert_weights_scale,
 * expert_gating_func (1 softmax, 2 sigmoid) and the expert groups; w_norm
 * 1, sh_ungated 0, probs_b 0.  No expert_count leaves h zeroed.
 * -1 with one line in err. */
int kl_moe_read_hparams(const kiln_model *m, kl_moe_hp *h, char *err, size_t errlen);
/* Binds layer il's ffn_gate_inp, ffn_{gate,up}_exps (or the fused
 * ffn_gate_up_exps), ffn_down_exps and, when present, their .bias tensors
 * (not with the fused one) and the shared expert;
 * views holds 3 * n_expert matrices the layer keeps pointing into. */
void kl_moe_bind(kl_binder *B, const kiln_model *m, const kl_moe_hp *h, int il, kl_moe_layer *l, kk_mat *views);
/* Appends the layer's matrices and vectors to the repack list. */
void kl_moe_weights(const kiln_model *m, const kl_moe_hp *h, kl_moe_layer *l, kl_weights *w);
/* The tensor bytes a decode step reads when 3-D tensors are expert stacks
 * of which it reads n_used of n_expert; tensors of layers >= n_layer
 * (blocks that do not run) are left out. */
uint64_t kl_moe_active_bytes(const kiln_model *m, const kl_moe_hp *h, int n_layer);

/* Allocates the activations for n_batch tokens; -1 when out of memory
 * (what was allocated is freed by kl_moe_ws_free). */
int kl_moe_ws_init(kl_moe_ws *w, const kl_moe_hp *h, int n_embd, int n_batch);
void kl_moe_ws_free(kl_moe_ws *w);
/* Rows and widest input of the products kl_moe_ffn runs, for sizing the
 * context's matmul scratch. */
int kl_moe_mm_rows(const kl_moe_hp *h, int n_batch);
int64_t kl_moe_mm_cols(const kl_moe_hp *h);

/* The FFN of n tokens: xn [n][n_embd] in (overwritten: it serves as the
 * accumulator), y [n][n_embd] out.  Uses c->pool and c->mm_scratch. */
void kl_moe_ffn(kiln_context *c, const kk_ops *ops, const kl_moe_hp *h, const kl_moe_layer *L, kl_moe_ws *w, float *xn,
                float *y, int n);

#endif
