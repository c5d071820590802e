/*
 * The nemotron family: nemotron_h and nemotron_h_moe (NVIDIA Nemotron-H,
 * Nemotron Nano 2 and 3).  Every block is one mixer with its own norm and
 * no separate FFN sublayer:
 *
 *   x += mixer(xn),        xn = rms(x) * attn_norm
 *
 * and the mixer's kind comes from two per-layer arrays: Mamba-2 where
 * attention.head_count_kv and feed_forward_length are both 0, attention
 * where only feed_forward_length is, else the FFN (a dense MLP, or experts
 * where the block has a router).
 *
 * Mamba-2 (state in the context's pool, model/state.h):
 *   [z | xBC | dt] = Win xn                   z [Di], xBC [Di + 2 G N], dt [Hs]
 *   [x | B | C] = silu(causal_conv(xBC) + conv_bias)
 *   per head h (P = Di / Hs channels, group g = h / (Hs / G) for B and C):
 *     S_h = e^(dt_h A_h) S_h + (x_h dt_h) B_g^T,  y_h = S_h C_g + D_h x_h   (kernels/ssm.h)
 *     with dt_h = softplus(dt_h + dt_bias_h), A = ssm_a = -exp(A_log)
 *   mixer = Wout rms_g(y * silu(z)) * ssm_norm   RMSNorm over each of G groups of Di / G
 * A prompt's tokens go through the scan in the recurrent form too, each
 * head's run in one call with its state in cache (the chunked SSD form
 * would do more arithmetic on a CPU), so a prompt in pieces, a decoded
 * token and a replayed one give the same bits.
 * Attention: no positional encoding, scale 1/sqrt(hd), GQA over the KV cache.
 * MLP: Wdown relu(Wup xn)^2, no gate.
 * MoE (model/moe.h): sigmoid of the router's logits, the top k chosen on
 * sigmoid + exp_probs_b, weighted by the unbiased sigmoids (renormalized
 * when expert_weights_norm, times expert_weights_scale); experts and the
 * shared expert are relu(up xn)^2 then down; the shared expert is added
 * unweighted.
 *
 * Shapes of the activations, per token row (every buffer sized for n_batch
 * rows when a context is made): x, xn, y [n_embd]; zx [d_in = 2 Di + 2 G N
 * + Hs]; xbc [Di + 2 G N]; dts [Hs]; o [Di]; q, att [n_head * hd]; k, v
 * [n_head_kv * hd]; up [widest MLP].
 */
#include "model/decoder.h"
#include "model/moe.h"
#include "model/state.h"

#include "kernels/ssm.h"
#include "quant/quant.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NEM_MAMBA, NEM_ATTN, NEM_MLP, NEM_MOE };

static const model_arch k_archs[] = {
    {"nemotron_h", &model_family_nemotron, 0, 0},     /* Nemotron-H, Nemotron Nano 2 */
    {"nemotron_h_moe", &model_family_nemotron, 0, 0}, /* Nemotron 3 Nano */
};

typedef struct nem_layer {
    int kind;
    int ord; /* ordinal among the Mamba-2 layers / among the attention layers */
    int F;   /* MLP width */
    const float *norm;
    /* Mamba-2 */
    kern_mat w_in, w_out;
    float *conv_w;                                 /* [K][conv_dim], transposed from GGUF's [conv_dim][K] */
    const float *conv_b, *dt_bias, *ssm_a, *ssm_d; /* [conv_dim], [Hs] x3 */
    const float *ssm_norm;                         /* [Di] (G groups of Di / G) */
    /* attention */
    kern_mat wq, wk, wv, wo;
    /* MLP */
    kern_mat w_up, w_down;
    model_moe_layer ex;
} nem_layer;

typedef struct nem_model {
    int n_layer, n_attn, n_rec;
    nem_layer *layers;
    /* Mamba-2 */
    int K, Di, N, Hs, G, P, conv_dim, d_in;
    size_t conv_floats, ssm_floats; /* per layer in a state slot */
    int F_max;
    model_moe_hp moe;
    kern_mat *experts;
    float *conv_mem;
} nem_model;

/* ---------------------------------------------------------------- binding */

/* Element i of {arch}.suffix: an array of at least n integers, or one value
 * for every layer.  -1 when missing or malformed. */
static int64_t layer_int(const kiln_model *m, const char *suffix, int n, int i) {
    const gguf_kv *kv = model_meta_kv(m, suffix);
    if (!kv) return -1;
    if (kv->type == GGUF_ARRAY) return (int64_t)kv->n >= n ? gguf_arr_int(kv, (uint64_t)i) : -1;
    return model_meta_int(m, suffix, -1);
}

static void bind_mamba(model_binder *B, kiln_model *m, nem_model *h, int i, nem_layer *l, float *conv) {
    const int64_t E = m->hp.n_embd;
    char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", i, s), n)
    l->w_in = model_bind_mat(B, NAME("ssm_in.weight"), E, h->d_in, 0);
    const int64_t cne[2] = {h->K, h->conv_dim};
    const gguf_tensor *ct = model_bind_tensor(B, NAME("ssm_conv1d.weight"), 2, cne, 0);
    if (ct && ct->type != QUANT_F32)
        model_bind_fail(B, "tensor %s must be F32 (it is %s)", n, quant_get((int)ct->type)->name);
    l->conv_b = model_bind_vec(B, NAME("ssm_conv1d.bias"), h->conv_dim, 1);
    l->dt_bias = model_bind_vec(B, NAME("ssm_dt.bias"), h->Hs, 0);
    const int64_t ane[2] = {1, h->Hs};
    const gguf_tensor *ta = model_bind_tensor(B, NAME("ssm_a"), 2, ane, 0);
    if (ta && ta->type != QUANT_F32) model_bind_fail(B, "tensor %s must be F32", n);
    const gguf_tensor *td = model_bind_tensor(B, NAME("ssm_d"), 2, ane, 0);
    if (td && td->type != QUANT_F32) model_bind_fail(B, "tensor %s must be F32", n);
    const int64_t nne[2] = {h->Di / h->G, h->G};
    const gguf_tensor *tn = model_bind_tensor(B, NAME("ssm_norm.weight"), 2, nne, 0);
    if (tn && tn->type != QUANT_F32) model_bind_fail(B, "tensor %s must be F32", n);
    l->w_out = model_bind_mat(B, NAME("ssm_out.weight"), h->Di, E, 0);
    if (!B->st) { /* the taps tap-major, so 8 channels load at once */
        l->ssm_a = ta->data;
        l->ssm_d = td->data;
        l->ssm_norm = tn->data;
        const float *src = ct->data;
        for (int c = 0; c < h->conv_dim; c++)
            for (int k = 0; k < h->K; k++) conv[(size_t)k * h->conv_dim + c] = src[(size_t)c * h->K + k];
        l->conv_w = conv;
    }
#undef NAME
}

/* Bias tensors kiln does not apply: refused rather than ignored. */
static void refuse_biases(model_binder *B, const kiln_model *m, int i) {
    static const char *const names[] = {"attn_q.bias",      "attn_k.bias",  "attn_v.bias",
                                        "attn_output.bias", "ffn_up.bias",  "ffn_down.bias",
                                        "ssm_in.bias",      "ssm_out.bias", "attn_qkv.weight"};
    char n[96];
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        snprintf(n, sizeof n, "blk.%d.%s", i, names[k]);
        if (gguf_find_tensor(m->gf, n)) {
            model_bind_fail(B, "tensor %s is not supported", n);
            return;
        }
    }
}

static kiln_status nem_bind(kiln_model *m) {
    model_hparams *hp = &m->hp;
    model_binder B = {m, KILN_OK};
    nem_model *h = calloc(1, sizeof *h);
    m->fam = h;
    if (!h) { return base_fail(KILN_ERR_NOMEM, "out of memory"); }
    const int64_t nextn = model_meta_int(m, "nextn_predict_layers", 0);
    if (nextn < 0 || nextn >= hp->n_layer) {
        return base_fail(KILN_ERR_FORMAT, "bad nextn_predict_layers %lld for %d blocks", (long long)nextn, hp->n_layer);
    }
    const int n_all = hp->n_layer;
    h->n_layer = hp->n_layer - (int)nextn; /* MTP blocks are not run */
    hp->n_layer = h->n_layer;
    /* Mamba-2 dimensions */
    const int64_t K = model_meta_int(m, "ssm.conv_kernel", 0), Di = model_meta_int(m, "ssm.inner_size", 0);
    const int64_t N = model_meta_int(m, "ssm.state_size", 0), Hs = model_meta_int(m, "ssm.time_step_rank", 0);
    const int64_t G = model_meta_int(m, "ssm.group_count", 0);
    if (K < 1 || K > KERN_CONV_MAX_K || N < 1 || N > 1024 || G < 1 || Hs < 1 || Hs > 4096 || Hs % G || Di < 1 ||
        Di > (1 << 20) || Di % Hs || Di % G) {
        return base_fail(
            KILN_ERR_FORMAT,
            "bad or missing Mamba-2 keys (ssm.conv_kernel %lld, ssm.inner_size %lld, ssm.state_size %lld, "
            "ssm.time_step_rank %lld, ssm.group_count %lld; kiln needs 1 <= conv_kernel <= %d and the heads and "
            "groups to divide inner_size, the groups the heads)",
            (long long)K, (long long)Di, (long long)N, (long long)Hs, (long long)G, KERN_CONV_MAX_K);
    }
    h->K = (int)K;
    h->Di = (int)Di;
    h->N = (int)N;
    h->Hs = (int)Hs;
    h->G = (int)G;
    h->P = (int)(Di / Hs);
    h->conv_dim = (int)(Di + 2 * G * N);
    h->d_in = (int)(2 * Di + 2 * G * N + Hs);
    h->conv_floats = (size_t)(K - 1) * (size_t)h->conv_dim;
    h->ssm_floats = (size_t)Di * (size_t)N;
    /* experts: sigmoid routing, relu^2 experts without a gate (llama.cpp
     * fixes both for this architecture) */
    kiln_status st = model_moe_read_hparams(m, &h->moe);
    if (st) return st;
    h->moe.sigmoid = 1;
    h->moe.probs_b = 1;
    h->moe.sh_ungated = 1;
    h->moe.act = MODEL_MOE_RELU2;
    h->moe.w_norm = model_meta_int(m, "expert_weights_norm", 0) != 0;
    /* the block layout */
    h->layers = calloc((size_t)h->n_layer, sizeof *h->layers);
    h->experts = h->moe.n_expert ? calloc((size_t)h->n_layer * 3 * (size_t)h->moe.n_expert, sizeof *h->experts) : NULL;
    if (!h->layers || (h->moe.n_expert && !h->experts)) { return base_fail(KILN_ERR_NOMEM, "out of memory"); }
    int kv_heads = 0, ff_any = 0;
    for (int i = 0; i < h->n_layer; i++) {
        nem_layer *l = &h->layers[i];
        const int64_t hkv = layer_int(m, "attention.head_count_kv", n_all, i);
        const int64_t ff = layer_int(m, "feed_forward_length", n_all, i);
        if (hkv < 0 || hkv > hp->n_head || ff < 0 || ff > (1 << 20)) {
            return base_fail(KILN_ERR_FORMAT,
                             "layer %d: bad attention.head_count_kv %lld or feed_forward_length %lld (arrays of %d "
                             "entries)",
                             i, (long long)hkv, (long long)ff, n_all);
        }
        char n[96];
        snprintf(n, sizeof n, "blk.%d.ffn_gate_inp.weight", i);
        if (hkv == 0 && ff == 0) {
            l->kind = NEM_MAMBA;
            l->ord = h->n_rec++;
        } else if (ff == 0) {
            if (kv_heads && hkv != kv_heads) {
                return base_fail(KILN_ERR_FORMAT, "attention layers with %d and %lld KV heads are not supported",
                                 kv_heads, (long long)hkv);
            }
            if (hp->n_head % hkv) {
                return base_fail(KILN_ERR_FORMAT, "layer %d: %d heads over %lld KV heads", i, hp->n_head,
                                 (long long)hkv);
            }
            kv_heads = (int)hkv;
            l->kind = NEM_ATTN;
            l->ord = h->n_attn++;
        } else {
            l->kind = gguf_find_tensor(m->gf, n) ? NEM_MOE : NEM_MLP;
            l->F = (int)ff;
            if (l->kind == NEM_MLP && l->F > h->F_max) h->F_max = l->F;
            if (l->F > ff_any) ff_any = l->F;
        }
    }
    hp->n_head_kv = kv_heads ? kv_heads : 1;
    hp->n_ff = ff_any; /* reported: the widest FFN layer's width, MoE layers' included */
    h->conv_mem = h->n_rec ? malloc((size_t)h->n_rec * (size_t)h->K * (size_t)h->conv_dim * sizeof(float)) : NULL;
    if (h->n_rec && !h->conv_mem) { return base_fail(KILN_ERR_NOMEM, "out of memory"); }
    /* tensors */
    const int64_t E = hp->n_embd, hd = hp->hd_k, nq = (int64_t)hp->n_head * hd, nkv = (int64_t)hp->n_head_kv * hd;
    m->tok_embd = model_bind_mat(&B, "token_embd.weight", E, -1, 0);
    hp->n_vocab = (int)m->tok_embd.nrows;
    m->out_norm = model_bind_vec(&B, "output_norm.weight", E, 0);
    m->output = model_bind_mat(&B, "output.weight", E, hp->n_vocab, 1);
    if (!m->output.data) m->output = m->tok_embd;
    for (int i = 0; i < h->n_layer && !B.st; i++) {
        nem_layer *l = &h->layers[i];
        char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", i, s), n)
        refuse_biases(&B, m, i);
        l->norm = model_bind_vec(&B, NAME("attn_norm.weight"), E, 0);
        switch (l->kind) {
        case NEM_MAMBA: bind_mamba(&B, m, h, i, l, h->conv_mem + (size_t)l->ord * h->K * h->conv_dim); break;
        case NEM_ATTN:
            l->wq = model_bind_mat(&B, NAME("attn_q.weight"), E, nq, 0);
            l->wk = model_bind_mat(&B, NAME("attn_k.weight"), E, nkv, 0);
            l->wv = model_bind_mat(&B, NAME("attn_v.weight"), E, nkv, 0);
            l->wo = model_bind_mat(&B, NAME("attn_output.weight"), nq, E, 0);
            break;
        case NEM_MLP:
            l->w_up = model_bind_mat(&B, NAME("ffn_up.weight"), E, l->F, 0);
            l->w_down = model_bind_mat(&B, NAME("ffn_down.weight"), l->F, E, 0);
            break;
        case NEM_MOE:
            if (!h->moe.n_expert) {
                model_bind_fail(&B, "layer %d routes to experts but expert_count is 0", i);
                break;
            }
            if (gguf_find_tensor(m->gf, NAME("ffn_latent_down.weight"))) {
                model_bind_fail(&B, "layer %d: latent experts (moe_latent_size) are not supported", i);
                break;
            }
            model_moe_bind(&B, m, &h->moe, i, &l->ex, h->experts + (size_t)i * 3 * h->moe.n_expert);
            break;
        }
#undef NAME
    }
    if (B.st) return B.st;
    m->active_bytes = model_moe_active_bytes(m, &h->moe, h->n_layer);
    return 0;
}

static void nem_free(kiln_model *m) {
    nem_model *h = m->fam;
    if (!h) return;
    free(h->layers);
    free(h->experts);
    free(h->conv_mem);
    free(h);
}

static void nem_weights(kiln_model *m, model_weights *w) {
    nem_model *h = m->fam;
    const int64_t E = m->hp.n_embd;
    model_weights_mat(w, &m->output);
    model_weights_vec(w, &m->out_norm, E);
    for (int i = 0; i < h->n_layer; i++) {
        nem_layer *l = &h->layers[i];
        kern_mat *ms[] = {&l->w_in, &l->w_out, &l->wq, &l->wk, &l->wv, &l->wo, &l->w_up, &l->w_down};
        for (size_t k = 0; k < sizeof ms / sizeof ms[0]; k++) model_weights_mat(w, ms[k]);
        if (l->kind == NEM_MOE) model_moe_weights(m, &h->moe, &l->ex, w);
        model_weights_vec(w, &l->norm, E);
        model_weights_vec(w, &l->conv_b, h->conv_dim);
        model_weights_vec(w, &l->dt_bias, h->Hs);
        model_weights_vec(w, &l->ssm_a, h->Hs);
        model_weights_vec(w, &l->ssm_d, h->Hs);
        model_weights_vec(w, &l->ssm_norm, h->Di);
    }
}

/* Floats a recorded run keeps per token and Mamba-2 layer: the
 * convolution's input row, then each head's step after softplus. */
static size_t roll_row(const nem_model *h) { return (size_t)h->conv_dim + (size_t)h->Hs; }

static void nem_seq_shape(const kiln_model *m, model_seq_shape *s) {
    const nem_model *h = m->fam;
    memset(s, 0, sizeof *s);
    s->n_attn_layer = h->n_attn;
    s->n_head_kv = m->hp.n_head_kv;
    s->hd = m->hp.hd_k;
    s->rs_floats = (size_t)h->n_rec * (h->conv_floats + h->ssm_floats);
    s->roll_floats = (size_t)h->n_rec * MODEL_RS_ROLL_MAX * roll_row(h);
}

/* ------------------------------------------------------------ activations */

#define NEM_MAX_CAP 4

typedef struct nem_ws {
    float *x, *xn, *y;
    float *zx, *xbc, *dts, *o;
    float *q, *k, *v, *att;
    float *up;
    model_moe_ws ex;
    int32_t *ord, *tmp_i; /* work row -> batch index; [n] */
    int32_t *run;         /* [n + 1] row where each run of one sequence starts */
    int n_run;
    int32_t *verify;  /* [n] 1: the run is recorded for rollback (state.h) */
    int32_t *cap_n;   /* [n] snapshots per run */
    int32_t *cap_pos; /* [n][NEM_MAX_CAP] */
    float **cap_dst;  /* [n][NEM_MAX_CAP] */
} nem_ws;

static void nem_ctx_free(kiln_context *c) {
    nem_ws *w = c->ws;
    if (w) {
        void *bufs[] = {w->x,   w->xn, w->y,   w->zx,    w->xbc, w->dts,    w->o,     w->q,       w->k,      w->v,
                        w->att, w->up, w->ord, w->tmp_i, w->run, w->verify, w->cap_n, w->cap_pos, w->cap_dst};
        model_moe_ws_free(c, &w->ex);
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
        free(w);
    }
    free(c->mm_scratch);
    c->ws = c->mm_scratch = NULL;
}

static int nem_ctx_init(kiln_context *c) {
    const kiln_model *m = c->m;
    const model_hparams *hp = &m->hp;
    const nem_model *h = m->fam;
    nem_ws *w = calloc(1, sizeof *w);
    c->ws = w;
    if (!w) return -1;
    /* a replayed run (MODEL_RS_ROLL_MAX tokens) uses xbc and o as well */
    const size_t B = (size_t)c->p.n_batch, E = (size_t)hp->n_embd, hd = (size_t)hp->hd_k;
    const size_t BR = B > MODEL_RS_ROLL_MAX ? B : MODEL_RS_ROLL_MAX;
    const size_t nq = (size_t)hp->n_head * hd, nkv = (size_t)hp->n_head_kv * hd;
    const size_t attn = h->n_attn ? 1 : 0, rec = h->n_rec ? 1 : 0, moe = h->moe.n_expert ? 1 : 0;
    struct {
        void **p;
        size_t bytes;
    } bufs[] = {
        {(void **)&w->x, B * E * 4},
        {(void **)&w->xn, B * E * 4},
        {(void **)&w->y, B * E * 4},
        {(void **)&w->zx, rec * B * (size_t)h->d_in * 4},
        {(void **)&w->xbc, rec * BR * (size_t)h->conv_dim * 4},
        {(void **)&w->dts, rec * B * (size_t)h->Hs * 4},
        {(void **)&w->o, rec * BR * (size_t)h->Di * 4},
        {(void **)&w->q, attn * B * nq * 4},
        {(void **)&w->k, attn * B * nkv * 4},
        {(void **)&w->v, attn * B * nkv * 4},
        {(void **)&w->att, attn * B * nq * 4},
        {(void **)&w->up, B * (size_t)h->F_max * 4},
        {(void **)&w->ord, B * 4},
        {(void **)&w->tmp_i, B * 4},
        {(void **)&w->run, (B + 1) * 4},
        {(void **)&w->verify, B * 4},
        {(void **)&w->cap_n, B * 4},
        {(void **)&w->cap_pos, B * NEM_MAX_CAP * 4},
        {(void **)&w->cap_dst, B * NEM_MAX_CAP * sizeof(float *)},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (!(*bufs[i].p = malloc(bufs[i].bytes ? bufs[i].bytes : 1))) return -1;
    if (moe && model_moe_ws_init(c, &w->ex, &h->moe, hp->n_embd, c->p.n_batch)) return -1;
    /* matrix products: widest input row and most rows at once */
    size_t maxk = E;
    const size_t cols[] = {attn * nq, rec * (size_t)h->Di, (size_t)h->F_max, moe * (size_t)model_moe_mm_cols(&h->moe)};
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++) maxk = cols[i] > maxk ? cols[i] : maxk;
    const size_t rows = moe ? (size_t)model_moe_mm_rows(&h->moe, c->p.n_batch) : B;
    const int mrows = (int)(rows > B ? rows : B);
    c->mm_scratch = malloc(kern_matmul_scratch_size((int64_t)maxk, mrows));
    /* the backend's own products (the experts, the output head) */
    return c->mm_scratch && !c->bx.ops->reserve(&c->bx, (int64_t)maxk, mrows) ? 0 : -1;
}

/* ---------------------------------------------------------------- forward */

typedef struct nem_job {
    kiln_context *c;
    const kern_ssm_ops *sops;
    const nem_layer *L;
    atomic_long next;
} nem_job;

/* The end (work row) of segment k of run r: at each snapshot, then at the
 * run's end. */
static int seg_end(const kiln_context *c, const nem_ws *w, int r, int k) {
    const int r0 = w->run[r];
    return k < w->cap_n[r] ? r0 + (w->cap_pos[(size_t)r * NEM_MAX_CAP + k] - c->b_pos[r0]) : w->run[r + 1];
}

/* The convolution: work items of (run, block of channels), each through
 * every snapshot of its run. */
#define CONV_BLOCK 256

static void conv_task(void *ud, int ith, int nth) {
    nem_job *j = ud;
    kiln_context *c = j->c;
    nem_ws *w = c->ws;
    const nem_model *h = c->m->fam;
    const nem_layer *L = j->L;
    const int nb = (h->conv_dim + CONV_BLOCK - 1) / CONV_BLOCK;
    const long n_items = (long)w->n_run * nb;
    const size_t layer_off = (size_t)L->ord * (h->conv_floats + h->ssm_floats);
    for (long it; (it = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < n_items;) {
        const int r = (int)(it / nb), c0 = (int)(it % nb) * CONV_BLOCK;
        const int cn = h->conv_dim - c0 < CONV_BLOCK ? h->conv_dim - c0 : CONV_BLOCK;
        float *state = model_rs_live(c->rs, c->b_seq[w->run[r]]) + layer_off + c0;
        int t = w->run[r];
        for (int k = 0; k <= w->cap_n[r]; k++) {
            const int end = seg_end(c, w, r, k);
            if (end > t) {
                kern_conv a = {end - t,
                               cn,
                               h->K,
                               w->zx + (size_t)t * h->d_in + h->Di + c0,
                               (size_t)h->d_in,
                               L->conv_w + c0,
                               state,
                               (size_t)h->conv_dim,
                               w->xbc + (size_t)t * h->conv_dim + c0,
                               (size_t)h->conv_dim,
                               L->conv_b ? L->conv_b + c0 : NULL};
                j->sops->conv_silu(&a);
                t = end;
            }
            if (k < w->cap_n[r]) {
                float *dst = w->cap_dst[(size_t)r * NEM_MAX_CAP + k] + layer_off + c0;
                for (int row = 0; row < h->K - 1; row++)
                    memcpy(dst + (size_t)row * h->conv_dim, state + (size_t)row * h->conv_dim,
                           (size_t)cn * sizeof(float));
            }
        }
    }
    (void)ith;
    (void)nth;
}

/* The scan of head hh over rows t0 .. t1 of xbc (ld conv_dim) and dts (ld
 * Hs) into o (ld Di), state S. */
static void scan_head(const nem_model *h, const nem_layer *L, const kern_ssm_ops *sops, int hh, const float *xbc,
                      const float *dts, size_t ld_dt, float *o, int n, float *S) {
    const int g = hh / (h->Hs / h->G);
    kern_ssd a = {n,
                  h->P,
                  h->N,
                  xbc + (size_t)hh * h->P,
                  (size_t)h->conv_dim,
                  xbc + h->Di + (size_t)g * h->N,
                  xbc + h->Di + (size_t)(h->G + g) * h->N,
                  (size_t)h->conv_dim,
                  dts + hh,
                  ld_dt,
                  L->ssm_a[hh],
                  L->ssm_d[hh],
                  S,
                  o + (size_t)hh * h->P,
                  (size_t)h->Di};
    sops->ssd_scan(&a);
}

/* The scan: work items of (run, head). */
static void scan_task(void *ud, int ith, int nth) {
    nem_job *j = ud;
    kiln_context *c = j->c;
    nem_ws *w = c->ws;
    const nem_model *h = c->m->fam;
    const nem_layer *L = j->L;
    const long n_items = (long)w->n_run * h->Hs;
    const size_t layer_off = (size_t)L->ord * (h->conv_floats + h->ssm_floats) + h->conv_floats;
    const size_t head = (size_t)h->P * h->N;
    for (long it; (it = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < n_items;) {
        const int r = (int)(it / h->Hs), hh = (int)(it % h->Hs);
        float *S = model_rs_live(c->rs, c->b_seq[w->run[r]]) + layer_off + (size_t)hh * head;
        int t = w->run[r];
        for (int k = 0; k <= w->cap_n[r]; k++) {
            const int end = seg_end(c, w, r, k);
            if (end > t) {
                scan_head(h, L, j->sops, hh, w->xbc + (size_t)t * h->conv_dim, w->dts + (size_t)t * h->Hs,
                          (size_t)h->Hs, w->o + (size_t)t * h->Di, end - t, S);
                t = end;
            }
            if (k < w->cap_n[r])
                memcpy(w->cap_dst[(size_t)r * NEM_MAX_CAP + k] + layer_off + (size_t)hh * head, S,
                       head * sizeof(float));
        }
    }
    (void)ith;
    (void)nth;
}

static void run_items(nem_job *j, thread_pool_fn fn, long n_items) {
    atomic_store_explicit(&j->next, 0, memory_order_relaxed);
    if (n_items <= 1)
        fn(j, 0, 1);
    else
        thread_pool_run_shared(j->c->pool, fn, j);
}

/* Per-token element-wise steps, on the pool when the batch is big enough. */
enum nem_step {
    STEP_NORM_IN, /* xn = rms(x) * attn_norm */
    STEP_DT,      /* dts = softplus(dt + dt_bias) */
    STEP_GATE,    /* o = rms_g(o * silu(z)) * ssm_norm, per group */
    STEP_RESID,   /* x += y */
};

typedef struct nem_tok {
    kiln_context *c;
    const kern_ops *ops;
    const nem_layer *L;
    int n;
    enum nem_step step;
} nem_tok;

static void tok_range(const nem_tok *j, int i0, int i1) {
    kiln_context *c = j->c;
    nem_ws *w = c->ws;
    const nem_model *h = c->m->fam;
    const nem_layer *L = j->L;
    const int E = c->m->hp.n_embd;
    const float eps = c->m->hp.eps;
    for (int i = i0; i < i1; i++) {
        float *zx = w->zx + (size_t)i * h->d_in;
        switch (j->step) {
        case STEP_NORM_IN: j->ops->rmsnorm(w->xn + (size_t)i * E, w->x + (size_t)i * E, L->norm, E, eps); break;
        case STEP_DT: {
            const float *dt = zx + 2 * h->Di + 2 * (size_t)h->G * h->N;
            float *d = w->dts + (size_t)i * h->Hs;
            for (int hh = 0; hh < h->Hs; hh++) d[hh] = kern_softplus(dt[hh] + L->dt_bias[hh]);
            break;
        }
        case STEP_GATE: { /* silu(z) * o into z (no longer needed), then each group's norm back into o */
            float *o = w->o + (size_t)i * h->Di;
            j->ops->swiglu(zx, o, h->Di);
            const int gw = h->Di / h->G;
            for (int g = 0; g < h->G; g++)
                j->ops->rmsnorm(o + (size_t)g * gw, zx + (size_t)g * gw, L->ssm_norm + (size_t)g * gw, gw, eps);
            break;
        }
        case STEP_RESID: j->ops->add(w->x + (size_t)i * E, w->y + (size_t)i * E, E); break;
        }
    }
}

static void tok_task(void *ud, int ith, int nth) {
    const nem_tok *j = ud;
    long lo, hi;
    thread_pool_range(j->n, ith, nth, &lo, &hi);
    tok_range(j, (int)lo, (int)hi);
}

#define TOK_PAR_MIN 4

static void tok_step(kiln_context *c, const kern_ops *ops, const nem_layer *L, int n, enum nem_step step) {
    nem_tok j = {c, ops, L, n, step};
    if (n >= TOK_PAR_MIN)
        thread_pool_run(c->pool, tok_task, &j);
    else
        tok_range(&j, 0, n);
}

static void mamba_layer(kiln_context *c, const kern_ops *ops, const kern_ssm_ops *sops, const nem_layer *L, int n) {
    nem_ws *w = c->ws;
    const nem_model *h = c->m->fam;
    kern_matmul(c->pool, &L->w_in, w->xn, n, w->zx, h->d_in, c->mm_scratch);
    tok_step(c, ops, L, n, STEP_DT);
    for (int r = 0; r < w->n_run; r++) { /* a recorded run keeps this layer's inputs */
        if (!w->verify[r]) continue;
        const int r0 = w->run[r], len = w->run[r + 1] - r0;
        float *dst = model_rs_roll_in(c->rs, c->b_seq[r0]) + (size_t)L->ord * MODEL_RS_ROLL_MAX * roll_row(h);
        for (int t = 0; t < len; t++, dst += roll_row(h)) {
            memcpy(dst, w->zx + (size_t)(r0 + t) * h->d_in + h->Di, (size_t)h->conv_dim * sizeof(float));
            memcpy(dst + h->conv_dim, w->dts + (size_t)(r0 + t) * h->Hs, (size_t)h->Hs * sizeof(float));
        }
    }
    nem_job j = {c, sops, L, 0};
    const int nb = (h->conv_dim + CONV_BLOCK - 1) / CONV_BLOCK;
    run_items(&j, conv_task, n == 1 ? 1 : (long)w->n_run * nb);
    run_items(&j, scan_task, (long)w->n_run * h->Hs);
    tok_step(c, ops, L, n, STEP_GATE);
    kern_matmul(c->pool, &L->w_out, w->o, n, w->y, c->m->hp.n_embd, c->mm_scratch);
}

static void attention_layer(kiln_context *c, const kern_ops *ops, const nem_layer *L, int n) {
    nem_ws *w = c->ws;
    const model_hparams *hp = &c->m->hp;
    const int64_t nq = (int64_t)hp->n_head * hp->hd_k, nkv = (int64_t)hp->n_head_kv * hp->hd_k;
    kern_mm_out o[3] = {{&L->wq, w->q, nq}, {&L->wk, w->k, nkv}, {&L->wv, w->v, nkv}};
    kern_matmul_multi(c->pool, o, 3, w->xn, n, c->mm_scratch);
    for (int i = 0; i < n; i++)
        model_attn_store(c, L->ord, i, w->k + (size_t)i * nkv, w->v + (size_t)i * nkv); /* no RoPE */
    model_attn_run(c, L->ord, w->q, w->att, n);
    kern_matmul(c->pool, &L->wo, w->att, n, w->y, hp->n_embd, c->mm_scratch);
}

static void mlp_layer(kiln_context *c, const nem_layer *L, int n) {
    nem_ws *w = c->ws;
    kern_matmul(c->pool, &L->w_up, w->xn, n, w->up, L->F, c->mm_scratch);
    const size_t cnt = (size_t)n * L->F;
    for (size_t i = 0; i < cnt; i++) {
        const float r = w->up[i] > 0.0f ? w->up[i] : 0.0f;
        w->up[i] = r * r;
    }
    kern_matmul(c->pool, &L->w_down, w->up, n, w->y, c->m->hp.n_embd, c->mm_scratch);
}

static kiln_status nem_forward(kiln_context *c, const kiln_batch *b, int n_out) {
    const kiln_model *m = c->m;
    const model_hparams *hp = &m->hp;
    const nem_model *h = m->fam;
    nem_ws *w = c->ws;
    const int n = b->n, E = hp->n_embd;
    const kern_ops *ops = kern_ops_best();
    const kern_ssm_ops *sops = kern_ssm_ops_best();
    const int moved = model_batch_seq_runs(c, n, w->ord, w->tmp_i, w->run, &w->n_run);
    /* per run: recorded for rollback (every token asks for logits: a
     * decode token with drafts to verify), or the snapshots it takes */
    for (int r = 0; r < w->n_run; r++) {
        const int r0 = w->run[r], len = w->run[r + 1] - r0, seq = c->b_seq[r0];
        int all = h->n_rec && len >= 2 && len <= MODEL_RS_ROLL_MAX;
        for (int i = r0; all && i < r0 + len; i++) all = c->out_idx[w->ord[i]] >= 0;
        w->verify[r] = all;
        w->cap_n[r] = 0;
        if (!h->n_rec) continue;
        model_rs_record(c->rs, seq, c->b_pos[r0], all ? len : 0);
        if (!all)
            w->cap_n[r] = model_rs_plan(c, seq, c->b_pos[r0], c->b_pos[r0] + len, w->cap_pos + (size_t)r * NEM_MAX_CAP,
                                        w->cap_dst + (size_t)r * NEM_MAX_CAP, NEM_MAX_CAP);
    }
    if (h->n_attn) model_attn_prepare(c, n);
    for (int i = 0; i < n; i++) kern_get_row(&m->tok_embd, b->token[w->ord[i]], w->x + (size_t)i * E);
    for (int l = 0; l < h->n_layer; l++) {
        const nem_layer *L = &h->layers[l];
        tok_step(c, ops, L, n, STEP_NORM_IN);
        switch (L->kind) {
        case NEM_MAMBA: mamba_layer(c, ops, sops, L, n); break;
        case NEM_ATTN: attention_layer(c, ops, L, n); break;
        case NEM_MLP: mlp_layer(c, L, n); break;
        case NEM_MOE: model_moe_ffn(c, &h->moe, &L->ex, &w->ex, w->xn, w->y, n); break;
        }
        tok_step(c, ops, L, n, STEP_RESID);
    }
    model_batch_commit(c, n);
    const float *xo = w->x;
    if (moved) { /* back to batch order for the output rows (and b_seq / b_pos) */
        for (int i = 0; i < n; i++)
            memcpy(w->xn + (size_t)w->ord[i] * E, w->x + (size_t)i * E, (size_t)E * sizeof(float));
        xo = w->xn;
        model_batch_seq_restore(c, n, w->ord, w->tmp_i);
    }
    model_batch_output(c, xo, n, n_out);
    return KILN_OK;
}

/* model_family.replay: the recorded inputs of seq's last run through each
 * Mamba-2 layer's convolution and scan, token by token as the run computed
 * them, up to n tokens (on the calling thread; outputs dropped). */
static void nem_replay(kiln_context *c, int seq, int32_t n) {
    const nem_model *h = c->m->fam;
    nem_ws *w = c->ws;
    const kern_ssm_ops *sops = kern_ssm_ops_best();
    const size_t row = roll_row(h), head = (size_t)h->P * h->N;
    for (int l = 0; l < h->n_layer; l++) {
        const nem_layer *L = &h->layers[l];
        if (L->kind != NEM_MAMBA) continue;
        const float *in = model_rs_roll_in(c->rs, seq) + (size_t)L->ord * MODEL_RS_ROLL_MAX * row;
        float *st = model_rs_live(c->rs, seq) + (size_t)L->ord * (h->conv_floats + h->ssm_floats);
        kern_conv a = {n,      h->conv_dim,         h->K,     in, row, L->conv_w, st, (size_t)h->conv_dim,
                       w->xbc, (size_t)h->conv_dim, L->conv_b};
        sops->conv_silu(&a);
        for (int hh = 0; hh < h->Hs; hh++)
            scan_head(h, L, sops, hh, w->xbc, in + h->conv_dim, row, w->o, n, st + h->conv_floats + (size_t)hh * head);
    }
}

const model_family model_family_nemotron = {
    .name = "nemotron",
    .archs = k_archs,
    .n_archs = sizeof k_archs / sizeof k_archs[0],
    .bind = nem_bind,
    .free = nem_free,
    .weights = nem_weights,
    .seq_shape = nem_seq_shape,
    .ctx_init = nem_ctx_init,
    .ctx_free = nem_ctx_free,
    .forward = nem_forward,
    .replay = nem_replay,
};
