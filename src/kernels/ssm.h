/*
 * ssm — the kernels of the recurrent layers: the causal depthwise
 * convolution with its carried state (Gated DeltaNet and Mamba-2), the
 * gated delta rule (qwen35, qwen3next) in its recurrent form (one token
 * after the other) and its chunked form (KERN_GDN_CHUNK tokens at a time as
 * small matrix products), and the Mamba-2 selective-state scan
 * (nemotron_h).  All F32.  Each kernel has a scalar reference here and an
 * AVX2 twin (ssm_avx2.c); kern_ssm_ops_at() hands out one set or the other.
 */
#ifndef KILN_SSM_H
#define KILN_SSM_H

#include <stddef.h>
#include <stdint.h>

/* Causal depthwise convolution of K taps over n tokens of C channels, then
 * SiLU:  y[t][c] = silu(sum_k w[k][c] * in[t + k][c] + bias[c]), where in is the
 * previous K - 1 inputs (state) followed by x, and tap K - 1 meets the
 * current token.  The sum runs over k in order from 0, in float.
 *   x      [n] rows of ldx floats (channels 0..C-1 used)
 *   w      [K] rows of ldc floats: the taps, tap-major (the family
 *          transposes GGUF's [C][K]); ldc >= C, so a caller can hand a
 *          thread a slice of the channels
 *   state  [K - 1] rows of ldc floats, oldest first; on return the last
 *          K - 1 inputs
 *   y      [n] rows of ldy floats; may not alias x
 * K is at most KERN_CONV_MAX_K. */
#define KERN_CONV_MAX_K 16
typedef struct kern_conv {
    int n, C, K;
    const float *x;
    size_t ldx;
    const float *w;
    float *state;
    size_t ldc;
    float *y;
    size_t ldy;
    const float *bias; /* [C] added after the taps' sum (Mamba-2's conv1d bias); NULL: none */
} kern_conv;

/* The gated delta rule of one value head over n tokens, state S [dv][dk]
 * (row j belongs to value element j):
 *   S = e^g_t S;  d = beta_t (v_t - S k_t);  S += d k_t^T;  o_t = scale S q_t
 * q and k are the head's L2-normalized query and key, g_t <= 0 its log
 * decay.  The recurrent form (gdn_step) follows those lines per token: a
 * row's decay, its dot with k, its update and its dot with q, rows in
 * order.  The chunked form (gdn_chunk) cuts the tokens at absolute
 * positions that are multiples of KERN_GDN_CHUNK (pos0 is the first token's)
 * and computes each piece at once from its start state S0 with G_t the
 * decay summed over the piece up to t:
 *   u_t = beta_t (v_t - e^G_t S0 k_t) - sum_{s<t} beta_t e^(G_t-G_s) (k_t.k_s) u_s
 *   o_t = scale (e^G_t S0 q_t + sum_{s<=t} e^(G_t-G_s) (k_s.q_t) u_s)
 *   S   = e^G_last S0 + sum_s e^(G_last-G_s) u_s k_s^T
 * which is the recurrence rearranged (within float rounding of it; the
 * tests bound the difference).  Both forms give the same bits on every
 * twin up to the order of sums. */
#define KERN_GDN_CHUNK 16
typedef struct kern_gdn {
    int n;
    int pos0; /* absolute position of token 0 (chunk alignment) */
    int dk, dv;
    const float *q, *k; /* token t at q + t * ld_qk: [dk] */
    size_t ld_qk;
    const float *v; /* token t at v + t * ld_v: [dv] */
    size_t ld_v;
    const float *g, *beta; /* token t at g[t * ld_gb], beta[t * ld_gb] */
    size_t ld_gb;
    float scale;
    float *s; /* [dv][dk], updated */
    float *o; /* token t at o + t * ld_o: [dv] */
    size_t ld_o;
    float *scratch; /* kern_gdn_scratch(dk, dv) floats (chunked form) */
} kern_gdn;

static inline size_t kern_gdn_scratch(int dk, int dv) {
    const size_t C = KERN_GDN_CHUNK;
    /* S0 k, S0 q, u: [C][dv] each; k.k and k.q: [C][C]; G, e^G: [C] */
    return 3 * C * (size_t)dv + 2 * C * C + 2 * C + 16;
}

/* The Mamba-2 selective-state scan of one head over n tokens, state S
 * [P][N] (row p belongs to channel p of the head), one scalar decay A < 0
 * per head:
 *   dA = e^(dt_t A);  S[p][i] = S[p][i] dA + B_t[i] (x_t[p] dt_t)
 *   y_t[p] = sum_i S[p][i] C_t[i] + D x_t[p]
 * dt_t is the step after softplus.  Per row the state update and the dot
 * with C go together, i in order from 0, in float (ggml_ssm_scan's order:
 * the product B x dt rounded as B (x dt)).  y may not alias x. */
typedef struct kern_ssd {
    int n, P, N;
    const float *x; /* token t at x + t * ld_x: [P] */
    size_t ld_x;
    const float *B, *C; /* token t at B + t * ld_bc: [N] */
    size_t ld_bc;
    const float *dt; /* token t at dt[t * ld_dt] */
    size_t ld_dt;
    float A, D;
    float *s; /* [P][N], updated */
    float *y; /* token t at y + t * ld_y: [P] */
    size_t ld_y;
} kern_ssd;

typedef struct kern_ssm_ops {
    void (*conv_silu)(const kern_conv *a);
    void (*gdn_step)(const kern_gdn *a);
    void (*gdn_chunk)(const kern_gdn *a);
    void (*ssd_scan)(const kern_ssd *a);
} kern_ssm_ops;

/* The set of level isa (a QUANT_ISA_* value; the AVX-512 level's is the AVX2
 * set), NULL if the CPU lacks the level; kern_ssm_ops_best() the set of the
 * level quant_init() chose (kernels/level.c). */
const kern_ssm_ops *kern_ssm_ops_at(int isa);
const kern_ssm_ops *kern_ssm_ops_best(void);

/* In place: x = x / max(||x||, eps), the norm's square summed in double
 * (ggml_l2_norm). */
void kern_l2norm(float *x, int n, float eps);
/* out = rms(x) * w * silu(z) over n (Gated DeltaNet's output norm). */
void kern_rmsnorm_gated(float *out, const float *x, const float *w, const float *z, int n, float eps);
/* softplus(x) = log(1 + e^x), with ggml's cut-off (x > 20: x). */
float kern_softplus(float x);
float kern_sigmoid(float x);

/* Mixture-of-experts routing of one token: softmax over n_expert router
 * logits, the k largest (ties to the lower id), their probabilities
 * renormalized to sum 1 when norm (the sum clamped below at 6.1e-5, F16's
 * smallest normal) and then times scale (1: none).  ids[k], w[k] in
 * descending order.  logits is left unchanged. */
void kern_moe_route(const float *logits, int n_expert, int k, int norm, float scale, int32_t *ids, float *w);

/* The general routing (DeepSeek-V3's): p = sigmoid or softmax of the
 * logits (in place in p); experts are chosen by the k largest sel = p +
 * bias (bias NULL: p; ties to the lower id) among the n_group_used expert
 * groups (n_group consecutive runs of n_expert / n_group) whose two largest
 * sel values sum highest (n_group <= 1: no groups); w = the chosen experts'
 * p, renormalized and scaled as kern_moe_route's.  sel: n_expert floats of
 * scratch.  n_group <= 256. */
typedef struct kern_moe_gate {
    int sigmoid;       /* 1: sigmoid, 0: softmax */
    const float *bias; /* [n_expert] selection bias, NULL: none */
    int n_group, n_group_used;
    int norm;
    float scale;
} kern_moe_gate;
void kern_moe_route_sel(float *p, const kern_moe_gate *g, int n_expert, int k, float *sel, int32_t *ids, float *w);

#endif
