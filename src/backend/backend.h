/*
 * backend — the compute seam under the model layer.  A backend is a device
 * (today only the CPU, backend/cpu*.c) with a const table of ops; the
 * decoder families' forward code calls these ops and nothing else, so the
 * same family code runs whatever memory the pointers it passes name.
 *
 * Memory.  Activations, the paged KV cache's blocks and recurrent states
 * are backend memory (backend_ops.alloc / backend_backend.map): the families do
 * arithmetic on such pointers but never read or write through them.
 * Host-side metadata (token ids, positions, block tables, attention tiles,
 * RoPE tables) is passed as host arrays; a backend uploads what it needs.
 * Results the host reads (logits, the normalized output rows) are host
 * buffers the output op fills.
 *
 * Weights.  A matrix is a kern_mat pointing into the file's mapping; at load
 * the backend prepares what it wants (backend_backend.prepare: the CPU
 * interleaves Q4_0, Q8_0, Q4_K and Q6_K matrices into kern_mat.packed).
 *
 * Ops work over the n tokens of a step (rows of a fixed width, one after
 * another), so a device runs each as one or a few kernel launches; on the
 * CPU each is today's kernels on the context's thread pool, the token-wise
 * ones fused as the families ran them, so results are the same bits.
 */
#ifndef KILN_BACKEND_H
#define KILN_BACKEND_H

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "thread/pool.h"

#include <stddef.h>
#include <stdint.h>

/* The paged KV cache's cells: BACKEND_KV_BLOCK tokens a block (model.h). */
#define BACKEND_KV_BLOCK 16
#define BACKEND_KV_BLOCK_SHIFT 4 /* log2(BACKEND_KV_BLOCK) */
/* F16 cache: a query that sees up to this many positions keeps llama.cpp's
 * F16-rounded accumulator; one that sees more accumulates in float. */
#define BACKEND_ATTN_F16_ACC_MAX 256
/* Tokens of one sequence at consecutive positions that one attention call
 * takes together when they accumulate in float (the step's tiles). */
#define BACKEND_ATTN_TILE 4
/* Whether the query at position pos (F16 cache) accumulates in float. */
static inline int backend_attn_acc_f32(int pos) { return pos + 1 > BACKEND_ATTN_F16_ACC_MAX; }

enum { BACKEND_CPU = 1, BACKEND_CUDA = 2 }; /* kinds of backend (kiln_engine_backend's values) */

typedef struct backend_ops backend_ops;
typedef struct backend_ctx backend_ctx;
typedef struct backend_ctx_params backend_ctx_params;

typedef struct backend_backend {
    const char *name; /* "cpu" */
    int kind;         /* KBE_* */
    int host_mem;     /* 1: its memory is the host's (a copy back to the same address is nothing) */
    const backend_ops *ops;
    /* Prepares the weights at load: mats are every matrix the family may
     * multiply by, vecs (vlen[i] floats each) the small vectors between
     * them; either may be rewritten to point at backend memory, returned in
     * *mem (*bytes; NULL: nothing prepared), freed by release. */
    void (*prepare)(kern_mat **mats, int n_mats, const float ***vecs, const int64_t *vlen, int n_vecs, void **mem,
                    size_t *bytes);
    void (*release)(void *mem, size_t bytes);
    /* Zeroed memory for the KV cache or recurrent states (NULL: none), its
     * release, and copies within it (device to device). */
    void *(*map)(size_t bytes);
    void (*unmap)(void *p, size_t bytes);
    void (*copy)(void *dst, const void *src, size_t bytes);
    void (*zero)(void *dst, size_t bytes);
    /* a context's own state (backend_ctx.dev; backend_ctx_init calls it) */
    int (*ctx_init)(backend_ctx *X, const backend_ctx_params *p);
    void (*ctx_free)(backend_ctx *X);
} backend_backend;

/* The backend of a kind (KBE_*), NULL when this build has none. */
const backend_backend *backend_get(int kind);

/* The paged KV cache as the attention ops see it: block b of attention
 * layer l holds K at mem + b * block_bytes + l_off[l], as
 * [l_hkv[l]][BACKEND_KV_BLOCK][l_hd[l]] rows of l_hrow[l] bytes, and V right
 * after it the same way (unless V is in K: then the K rows are the values
 * too, and there are no V runs). */
typedef struct backend_kv {
    int type; /* KILN_KV_F16 / _F32 / _Q8_0 */
    int v_in_k;
    int n_head_kv, hd; /* the largest of the layers' */
    void *mem;         /* backend memory */
    size_t block_bytes;
    const int32_t *l_hkv, *l_hd; /* host, per attention layer */
    const size_t *l_hrow, *l_off;
    int32_t *const *blocks; /* [n_seq] host: each sequence's block table */
} backend_kv;

/* A layer's departures from plain causal attention (zero: none). */
typedef struct backend_attn_opts {
    int window;  /* > 0: sliding window: the query at position p sees only
                    p - window + 1 .. p (every position stays cached) */
    float scale; /* score scale; 0: 1 / sqrt(head size) */
    /* [n_head] attention sinks: each head's softmax gets one more logit,
     * not scaled, that adds no value (kern_attn_inv); NULL: none */
    const float *sinks;
} backend_attn_opts;

/* A step's host metadata (backend_ops.step), valid until the next step. */
typedef struct backend_step {
    int n;                    /* tokens */
    const int32_t *seq, *pos; /* [n] */
    const float *rope_cs;     /* [n][n_rot] rotation tables (kern_rope_table) */
    int n_rot;
    const int32_t *tile; /* [n_tile + 1]: where each attention tile starts */
    int n_tile;
    /* [n] the last position each token sees (>= pos: the tokens of an image
     * that attends both ways see all of it; a tile of their own), NULL:
     * pos, causal */
    const int32_t *see;
} backend_step;

/* A context's backend state: the device, its ops and the state of the
 * context that the ops share.  backend_ctx_init fills it. */
struct backend_ctx {
    const backend_backend *be;
    const backend_ops *ops;
    thread_pool *pool; /* the context's host threads */
    backend_kv kv;
    backend_step step;
    int n_head; /* query heads of the attention layers */
    void *dev;  /* the backend's own */
};

struct backend_ctx_params {
    thread_pool *pool;
    int n_head; /* query heads of the attention layers (0: none) */
    int n_ctx;  /* positions per sequence */
    const backend_kv *kv;
};

/* -1 when out of memory (backend_ctx_free frees what was made). */
int backend_ctx_init(backend_ctx *X, const backend_backend *be, const backend_ctx_params *p);
void backend_ctx_free(backend_ctx *X);

/* The q/k post-processing of an attention layer and the KV store, for the
 * step's n tokens: per token, q += bq, k += bk, v += bv; RMSNorm of every
 * head of q and k (q_norm, k_norm); RoPE of q and k with the step's tables
 * (rope: neox or normal pairs, n_rot dims of each head); q *= the query
 * temperature at the token's position; then k and v into the cache of
 * attention layer `layer`, in the cache's type.  NULL pointers skip steps
 * (q NULL: keys and values only). */
typedef struct backend_qk {
    float *q, *k, *v; /* [n][n_head * hd], [n][n_head_kv * hd] x2 */
    /* gated attention: [n][n_head][2 hd], each head's query then its gate;
     * q = rms(query) * q_norm per head (q_norm required); NULL: q as is */
    const float *qg;
    const float *bq, *bk, *bv;
    const float *q_norm, *k_norm; /* [hd] */
    int n_head, n_head_kv, hd;
    float eps;
    const kern_rope *rope;
    float temp, temp_floor; /* kern_attn_temp(pos, temp, 0, temp_floor); temp 0: none */
    int layer;
} backend_qk;

/* Mixture-of-experts FFN (model/moe.h says what it computes). */
enum {
    BACKEND_MOE_SOFTMAX = 0,      /* gating: softmax over all, top k, renormalized to sum 1 */
    BACKEND_MOE_TOPK_SOFTMAX = 1, /* gating: top k logits, softmax over just those k */
    BACKEND_MOE_SWIGLU = 0,       /* act: silu(g) * u */
    BACKEND_MOE_SWIGLU_OAI = 1,   /* act: the clamped SwiGLU kern_swiglu_oai, alpha 1.702, limit 7 */
    BACKEND_MOE_RELU2 = 2,        /* act: relu(u)^2 with no gate product (experts and shared expert) */
};

typedef struct backend_moe_hp {
    int n_expert, n_used;      /* experts, experts per token (0, 0: no MoE layers) */
    int F_exp, F_sh;           /* an expert's width, the shared expert's */
    float w_scale;             /* expert_weights_scale (0 or 1: none) */
    int w_norm;                /* 1: the top k weights renormalized */
    int sh_ungated;            /* 1: the shared expert is added as is (no ffn_gate_inp_shexp) */
    int sigmoid;               /* sigmoid probabilities instead of the softmax */
    int n_group, n_group_used; /* choose within the best groups of experts */
    int probs_b;               /* layers may carry exp_probs_b, a selection bias */
    int gating, act;           /* BACKEND_MOE_* */
} backend_moe_hp;

typedef struct backend_moe_layer {
    kern_mat router;                  /* n_embd -> n_expert, F32 */
    kern_mat *e_gate, *e_up, *e_down; /* [n_expert] views */
    kern_mat s_gate, s_up, s_down;    /* shared expert (data NULL: none) */
    const float *s_gate_inp;          /* [n_embd]: the shared expert's gate; NULL: ungated */
    const float *sel_bias;            /* [n_expert] exp_probs_b; NULL: none */
    /* biases, NULL where the file has none: the router's [n_expert], the
     * experts' gate and up [n_expert][F_exp] and down [n_expert][n_embd] */
    const float *router_b, *b_gate, *b_up, *b_down;
} backend_moe_layer;

/* The Gated DeltaNet core of a recurrent layer for the step's tokens,
 * grouped in runs of one sequence (run[r] .. run[r + 1]), between the input
 * products (qkv, z, ba) and the output product (o):
 *   beta = sigmoid(b), gd = softplus(a + dt_bias) * ssm_a       per value head
 *   cv = silu(causal_conv(qkv)) with each sequence's carried conv state
 *   the q and k heads of cv L2-normalized
 *   per value head the delta rule over the run (kernels/ssm.h), chunked
 *   unless the run is one token or recorded (verify[r]: token by token)
 *   o = rms(o_j) * ssm_norm * silu(z_j)
 * A recorded run's per-token inputs (qkv, beta, gd) go to its sequence's
 * rollback rows first.  At each capture position of a run the conv and
 * delta state are copied into that capture's slot (cap_dst, a state slot's
 * start; the layer's offsets are added).  States are backend memory: the
 * state of sequence s is state + s * slot_floats, this layer's conv state
 * at conv_off in it, its delta state (Hv heads of Dv x Dk) after. */
#define BACKEND_GDN_MAX_CAP 4
typedef struct backend_gdn {
    int Hk, Hv, Dk, Dv, K, conv_dim;
    int ba_grouped; /* ba per key head as [beta x r, alpha x r]; else [beta x Hv | alpha x Hv] */
    int kh_grouped; /* value head v reads key head v / (Hv / Hk); else v mod Hk */
    float eps;
    const float *conv_w; /* [K][conv_dim] */
    const float *dt_bias, *ssm_a, *ssm_norm;
    /* activations, per token row */
    const float *qkv, *z, *ba; /* [conv_dim], [Hv * Dv], [2 Hv] */
    float *beta, *gd, *cv, *o; /* [Hv], [Hv], [conv_dim], [Hv * Dv] */
    /* states */
    float *state;
    size_t slot_floats, conv_off, conv_floats;
    float *roll;                  /* rollback rows: sequence s's at roll + s * roll_stride + roll_off */
    size_t roll_stride, roll_off; /* a row is conv_dim + 2 Hv floats */
    /* host: the step's sequences and positions (in run order) and its runs */
    const int32_t *seq, *pos;
    const int32_t *run; /* [n_run + 1] */
    int n_run;
    const int32_t *verify, *cap_n, *cap_pos; /* [n_run], [n_run], [n_run][BACKEND_GDN_MAX_CAP] */
    float *const *cap_dst;                   /* [n_run][BACKEND_GDN_MAX_CAP] */
} backend_gdn;

/* The output head: the rows of x (n tokens of n_embd) whose out_idx is not
 * -1 normalized into rows[out_idx] (host), then, unless w is NULL, their
 * logits into logits[out_idx] (host, n_vocab each). */
typedef struct backend_out {
    const float *x;
    int n, n_out, n_embd, n_vocab;
    const int32_t *out_idx;
    const float *norm;
    float eps;
    const kern_mat *w;
    float *rows, *logits;
} backend_out;

/* The ops.  n counts the step's tokens (rows); widths are per row. */
struct backend_ops {
    /* activation memory (NULL when out of memory) */
    void *(*alloc)(backend_ctx *X, size_t bytes);
    void (*free)(backend_ctx *X, void *p);
    /* room for products of up to max_rows rows of up to max_cols inputs;
     * -1 when out of memory */
    int (*reserve)(backend_ctx *X, int64_t max_cols, int max_rows);
    /* host to backend memory and back (the same address, where the
     * backend's memory is the host's: nothing) */
    void (*upload)(backend_ctx *X, void *dst, const void *src, size_t bytes);
    void (*download)(backend_ctx *X, void *dst, const void *src, size_t bytes);
    /* the step's host metadata */
    void (*step)(backend_ctx *X, const backend_step *s);

    /* out[i] = row ids[i] (host) of w, as floats */
    void (*get_rows)(backend_ctx *X, const kern_mat *w, const int32_t *ids, int n, float *out);
    /* out = rms(x) * w by rows of dim (out may be x) */
    void (*rmsnorm)(backend_ctx *X, float *out, const float *x, const float *w, int n, int dim, float eps);
    /* y += x by rows of dim */
    void (*add)(backend_ctx *X, float *y, const float *x, int n, int dim);
    /* y += x, then out = rms(y) * w, by rows of dim (the residual and the
     * next norm; out may be x) */
    void (*add_rmsnorm)(backend_ctx *X, float *y, const float *x, float *out, const float *w, int n, int dim,
                        float eps);
    /* g = silu(g) * u by rows of dim */
    void (*swiglu)(backend_ctx *X, float *g, const float *u, int n, int dim);
    /* x = gelu(x) (tanh approximation) by rows of dim */
    void (*gelu)(backend_ctx *X, float *x, int n, int dim);

    /* y [n][ldy] = x [n][w.ncols] times w's rows */
    void (*matmul)(backend_ctx *X, const kern_mat *w, const float *x, int n, float *y, int64_t ldy);
    /* several matrices of the same input width over the same x */
    void (*matmul_multi)(backend_ctx *X, const kern_mm_out *outs, int n_out, const float *x, int n);
    /* output k over rows t0[k] .. t0[k] + nt[k] of x only */
    void (*matmul_ranges)(backend_ctx *X, const kern_mm_out *outs, const int32_t *t0, const int32_t *nt, int n_out,
                          const float *x, int n);

    /* attention layers: the q/k post-processing and KV store (backend_qk), the
     * store alone (tokens i0 .. i0+n of the step; k, v their rows), and
     * causal attention of every token of the step over its sequence's
     * cached positions 0..pos (q, out [n][n_head * hd], heads grouped over
     * the KV heads; o may be NULL) */
    void (*qk_store)(backend_ctx *X, const backend_qk *a, int n);
    void (*kv_store)(backend_ctx *X, int layer, int i0, int n, const float *k, const float *v);
    void (*attn)(backend_ctx *X, int layer, const float *q, float *out, int n, const backend_attn_opts *o);

    /* the MoE FFN: workspace for n_batch tokens (NULL when out of memory),
     * and the FFN of n tokens: xn [n][n_embd] in (overwritten), y out */
    void *(*moe_ws_new)(backend_ctx *X, const backend_moe_hp *h, int n_embd, int n_batch);
    void (*moe_ws_free)(backend_ctx *X, void *ws);
    void (*moe_ffn)(backend_ctx *X, const backend_moe_hp *h, const backend_moe_layer *L, void *ws, float *xn, float *y,
                    int n_embd, int n);

    /* gated attention's output gate: att = att * sigmoid(gate) per head,
     * the gate the second hd of each head of qg (backend_qk.qg) */
    void (*attn_gate)(backend_ctx *X, float *att, const float *qg, int n, int n_head, int hd);
    /* dst row idx[i] = src row i (host idx; a permutation of rows) */
    void (*scatter_rows)(backend_ctx *X, float *dst, const float *src, const int32_t *idx, int n, int dim);
    /* dst = 0 (bytes) and dst = src, within backend memory */
    void (*zero)(backend_ctx *X, void *dst, size_t bytes);
    void (*copy)(backend_ctx *X, void *dst, const void *src, size_t bytes);

    /* the Gated DeltaNet (backend_gdn): room for its chunked form (heads of
     * Dk x Dv), the core over the step's n tokens, and the replay of
     * sequence seq's recorded run over its first n tokens (its rollback
     * rows as input, from the live state, token by token; outputs dropped) */
    int (*gdn_reserve)(backend_ctx *X, int Dk, int Dv);
    void (*gdn)(backend_ctx *X, const backend_gdn *a, int n);
    void (*gdn_replay)(backend_ctx *X, const backend_gdn *a, int seq, int n);

    /* the output head (backend_out) */
    void (*output)(backend_ctx *X, const backend_out *o);
    /* out[i] (host) = the index of the largest of row i's dim values (the
     * first of equals), for greedy choices without copying rows back */
    void (*argmax)(backend_ctx *X, const float *x, int n, int dim, int32_t *out);
};

#endif
