/*
 * The hybrid family: qwen35, qwen35moe, qwen3next (the Qwen 3.5 family).
 * Layers are of two kinds, read from the metadata (attention.recurrent_layers,
 * else full_attention_interval: layer i is full attention iff
 * (i + 1) % interval == 0), each followed by a dense SwiGLU FFN or a mixture
 * of experts with a shared expert:
 *
 *   x += mixer(xn),        xn = rms(x) * attn_norm
 *   x += ffn(xn),          xn = rms(x) * post_attention_norm
 *
 * Gated attention (full-attention layers; KV cache by attention ordinal):
 *   [q_h | g_h] = (Wq xn)_h per head;  q = rope(rms(q_h) * q_norm), k = rope(rms(Wk xn) * k_norm)
 *   mixer = Wo (attn(q, k, Wv xn) * sigmoid(g))        NeoX RoPE on the first n_rot dims
 *
 * Gated DeltaNet (recurrent layers; state in the context's pool):
 *   c = silu(causal_conv(Wqkv xn))   = [q heads | k heads | v heads],  z = Wz xn
 *   q, k L2-normalized per head;  beta = sigmoid(Wb xn);  g = softplus(Wa xn + dt_bias) * ssm_a
 *   per value head j (reading key head j mod Hk, or j / (Hv/Hk) grouped):
 *     S = e^g S;  S += beta (v - S k) k^T;  o = S q / sqrt(Dk)      (kernels/ssm.h)
 *   mixer = Wout (rms(o_j) * ssm_norm * silu(z_j))
 *
 * MoE (model/moe.h): softmax over the router's logits, the top k
 * renormalized; out = sum_i w_i down_i(silu(gate_i xn) * up_i xn)
 *                     + sigmoid(shexp_gate . xn) * shared(xn).
 * Only the selected experts' rows are read.
 *
 * Shapes of the activations, per token row (every buffer sized for n_batch
 * rows when a context is made): x, xn, y [n_embd]; qg [n_head * 2 hd];
 * q, att [n_head * hd]; k, v [n_head_kv * hd]; qkv, cv [conv_dim];
 * z, o [Hv * Dv]; ba [2 Hv]; beta, gd [Hv]; gate, up [n_ff]; experts: the
 * token's k rows among [n_batch * k] rows grouped by expert.
 */
#include "model/decoder.h"
#include "model/moe.h"
#include "model/mtp.h"
#include "model/state.h"

#include "kernels/ssm.h" /* KERN_CONV_MAX_K */
#include "quant/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    HYB_GROUPED = 1, /* value head j reads key head j / (Hv / Hk) (qwen3next); else j mod Hk */
    HYB_BA = 2,      /* beta and alpha in one ssm_ba, grouped per key head as [beta x r, alpha x r] */
};

static const model_arch k_archs[] = {
    {"qwen35", &model_family_hybrid, 0, 0},
    {"qwen35moe", &model_family_hybrid, 0, 0},
    {"qwen3next", &model_family_hybrid, 0, HYB_GROUPED | HYB_BA},
};

typedef struct hyb_layer {
    int recurrent;                      /* 1: Gated DeltaNet, 0: full attention */
    int ord;                            /* ordinal among the layers of its kind */
    const float *attn_norm, *post_norm; /* [n_embd] */
    /* full attention */
    kern_mat wq, wk, wv, wo;      /* wq: n_embd -> n_head * 2 hd, per head [query | gate] */
    const float *q_norm, *k_norm; /* [hd] */
    /* Gated DeltaNet */
    kern_mat wqkv, wz, wbeta, walpha, wba, wout;
    const float *conv_w;          /* [K][conv_dim], transposed from GGUF's [conv_dim][K] */
    const float *dt_bias, *ssm_a; /* [Hv]; ssm_a = -exp(A_log) */
    const float *ssm_norm;        /* [Dv] */
    /* FFN */
    int moe;
    kern_mat w_gate, w_up, w_down; /* dense */
    model_moe_layer ex;            /* experts (moe) */
} hyb_layer;

/* A multi-token-prediction block (nextn, model/mtp.h): every forward
 * pass fills its KV cache when the context keeps one, and model_mtp_step runs
 * it whole.  Its embedding, head norm and head fall back to the model's
 * token embedding, output norm and output head where the file carries no
 * own (as llama.cpp reads Qwen 3.5 checkpoints). */
typedef struct hyb_mtp {
    int complete;     /* 1: every tensor the block needs is there */
    kern_mat eh_proj; /* 2 n_embd -> n_embd, input [enorm'd embedding | hnorm'd hidden] */
    const float *enorm, *hnorm;
    kern_mat embed_tokens, head; /* own; data NULL: the model's (mtp_embd, mtp_head) */
    const float *head_norm;      /* own; NULL: the output norm */
    hyb_layer block;             /* full attention (cache ordinal n_attn) + FFN */
} hyb_mtp;

typedef struct hyb_model {
    int n_layer, n_layer_all; /* run / declared (block_count, MTP included) */
    int n_attn, n_rec;
    hyb_layer *layers; /* [n_layer] */
    hyb_mtp *mtp;      /* [n_layer_all - n_layer] */
    /* Gated DeltaNet */
    int K, Hk, Hv, Dk, Dv, conv_dim, flags;
    size_t conv_floats, delta_floats; /* per layer in a state slot */
    model_moe_hp moe;
    int has_moe, has_dense;
    kern_mat *experts; /* all views (one allocation) */
    float *conv_mem;   /* all transposed conv weights */
} hyb_model;

/* ---------------------------------------------------------------- binding */

static int get_bool_array(const kiln_model *m, const char *suffix, int n, int *out) {
    const gguf_kv *kv = model_meta_kv(m, suffix);
    if (!kv) return 0;
    if (kv->type != GGUF_ARRAY || (int64_t)kv->n < n) return -1;
    for (int i = 0; i < n; i++) out[i] = gguf_arr_int(kv, (uint64_t)i) != 0;
    return 1;
}

static void bind_attention(model_binder *B, const kiln_model *m, int i, hyb_layer *l, int optional) {
    const model_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, hd = hp->hd_k, nq = (int64_t)hp->n_head * hd, nkv = (int64_t)hp->n_head_kv * hd;
    char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", i, s), n)
    l->wq = model_bind_mat(B, NAME("attn_q.weight"), E, 2 * nq, optional);
    l->wk = model_bind_mat(B, NAME("attn_k.weight"), E, nkv, optional);
    l->wv = model_bind_mat(B, NAME("attn_v.weight"), E, nkv, optional);
    l->wo = model_bind_mat(B, NAME("attn_output.weight"), nq, E, optional);
    l->q_norm = model_bind_vec(B, NAME("attn_q_norm.weight"), hd, optional);
    l->k_norm = model_bind_vec(B, NAME("attn_k_norm.weight"), hd, optional);
#undef NAME
}

static void bind_ffn(model_binder *B, kiln_model *m, hyb_model *h, int i, hyb_layer *l, kern_mat *views, int optional) {
    const model_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd;
    char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", i, s), n)
    l->moe = gguf_find_tensor(m->gf, NAME("ffn_gate_inp.weight")) != NULL;
    if (!l->moe) {
        if (hp->n_ff <= 0 && !optional) {
            model_bind_fail(B, "layer %d has a dense FFN but feed_forward_length is %d", i, hp->n_ff);
            return;
        }
        l->w_gate = model_bind_mat(B, NAME("ffn_gate.weight"), E, hp->n_ff, optional);
        l->w_up = model_bind_mat(B, NAME("ffn_up.weight"), E, hp->n_ff, optional);
        l->w_down = model_bind_mat(B, NAME("ffn_down.weight"), hp->n_ff, E, optional);
        h->has_dense = 1;
        return;
    }
    model_moe_bind(B, m, &h->moe, i, &l->ex, views);
    h->has_moe = 1;
#undef NAME
}

static void bind_recurrent(model_binder *B, kiln_model *m, hyb_model *h, int i, hyb_layer *l, float *conv) {
    const int64_t E = m->hp.n_embd, vd = (int64_t)h->Hv * h->Dv;
    char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", i, s), n)
    if (gguf_find_tensor(m->gf, NAME("ssm_in.weight")) && !gguf_find_tensor(m->gf, NAME("attn_qkv.weight"))) {
        model_bind_fail(B,
                        "layer %d: a fused ssm_in (an older %s conversion) is not supported; convert the model again",
                        i, m->arch_name);
        return;
    }
    l->wqkv = model_bind_mat(B, NAME("attn_qkv.weight"), E, h->conv_dim, 0);
    l->wz = model_bind_mat(B, NAME("attn_gate.weight"), E, vd, 0);
    if (h->flags & HYB_BA) {
        l->wba = model_bind_mat(B, NAME("ssm_ba.weight"), E, 2 * h->Hv, 0);
    } else {
        l->wbeta = model_bind_mat(B, NAME("ssm_beta.weight"), E, h->Hv, 0);
        l->walpha = model_bind_mat(B, NAME("ssm_alpha.weight"), E, h->Hv, 0);
    }
    const int64_t cne[2] = {h->K, h->conv_dim};
    const gguf_tensor *ct = model_bind_tensor(B, NAME("ssm_conv1d.weight"), 2, cne, 0);
    if (ct && ct->type != QUANT_F32)
        model_bind_fail(B, "tensor %s must be F32 (it is %s)", n, quant_get((int)ct->type)->name);
    l->dt_bias = model_bind_vec(B, NAME("ssm_dt.bias"), h->Hv, 0);
    l->ssm_a = model_bind_vec(B, NAME("ssm_a"), h->Hv, 0);
    l->ssm_norm = model_bind_vec(B, NAME("ssm_norm.weight"), h->Dv, 0);
    l->wout = model_bind_mat(B, NAME("ssm_out.weight"), vd, E, 0);
    if (!B->st) { /* the taps tap-major, so 8 channels load at once */
        const float *src = ct->data;
        for (int c = 0; c < h->conv_dim; c++)
            for (int k = 0; k < h->K; k++) conv[(size_t)k * h->conv_dim + c] = src[(size_t)c * h->K + k];
        l->conv_w = conv;
    }
#undef NAME
}

static kiln_status hyb_bind(kiln_model *m) {
    model_hparams *hp = &m->hp;
    model_binder B = {m, KILN_OK};
    hyb_model *h = calloc(1, sizeof *h);
    m->fam = h;
    if (!h) { return base_fail(KILN_ERR_NOMEM, "out of memory"); }
    h->flags = (int)m->arch->flags;
    h->n_layer_all = hp->n_layer;
    const int64_t nextn = model_meta_int(m, "nextn_predict_layers", 0);
    if (nextn < 0 || nextn >= hp->n_layer) {
        return base_fail(KILN_ERR_FORMAT, "bad nextn_predict_layers %lld for %d blocks", (long long)nextn, hp->n_layer);
    }
    h->n_layer = hp->n_layer - (int)nextn;
    hp->n_layer = h->n_layer; /* what runs */
    /* Gated DeltaNet dimensions: all keys must be there */
    const int64_t K = model_meta_int(m, "ssm.conv_kernel", 0), inner = model_meta_int(m, "ssm.inner_size", 0);
    const int64_t Dk = model_meta_int(m, "ssm.state_size", 0), Hv = model_meta_int(m, "ssm.time_step_rank", 0);
    const int64_t Hk = model_meta_int(m, "ssm.group_count", 0);
    if (K < 1 || K > KERN_CONV_MAX_K || Dk < 1 || Dk > 1024 || Hk < 1 || Hv < 1 || Hv > 4096 || Hv % Hk ||
        inner != Hv * Dk) {
        return base_fail(
            KILN_ERR_FORMAT,
            "bad or missing recurrent-state keys (ssm.conv_kernel %lld, ssm.state_size %lld, ssm.group_count "
            "%lld, ssm.time_step_rank %lld, ssm.inner_size %lld; kiln needs 1 <= conv_kernel <= %d and "
            "inner_size = time_step_rank x state_size)",
            (long long)K, (long long)Dk, (long long)Hk, (long long)Hv, (long long)inner, KERN_CONV_MAX_K);
    }
    h->K = (int)K;
    h->Dk = h->Dv = (int)Dk;
    h->Hk = (int)Hk;
    h->Hv = (int)Hv;
    h->conv_dim = (int)(2 * Hk * Dk + Hv * Dk);
    h->conv_floats = (size_t)(K - 1) * (size_t)h->conv_dim;
    h->delta_floats = (size_t)Hv * (size_t)Dk * (size_t)Dk;
    /* the layer layout */
    h->layers = calloc((size_t)h->n_layer, sizeof *h->layers);
    int *rec = calloc((size_t)h->n_layer_all, sizeof *rec);
    if (!h->layers || !rec) {
        free(rec);
        return base_fail(KILN_ERR_NOMEM, "out of memory");
    }
    const int got = get_bool_array(m, "attention.recurrent_layers", h->n_layer_all, rec);
    if (got < 0) {
        free(rec);
        return base_fail(KILN_ERR_FORMAT, "attention.recurrent_layers must be an array of %d flags", h->n_layer_all);
    }
    if (!got) {
        const int64_t iv = model_meta_int(m, "full_attention_interval", 4);
        if (iv < 1) {
            free(rec);
            return base_fail(KILN_ERR_FORMAT, "bad full_attention_interval %lld", (long long)iv);
        }
        for (int i = 0; i < h->n_layer_all; i++) rec[i] = (i + 1) % iv != 0;
    }
    for (int i = 0; i < h->n_layer; i++) {
        h->layers[i].recurrent = rec[i];
        h->layers[i].ord = rec[i] ? h->n_rec++ : h->n_attn++;
    }
    free(rec);
    /* attention: NeoX RoPE on the first n_rot dims, interleaved M-RoPE over
     * the sections when the file has them (qwen35, qwen35moe: text tokens
     * have all positions equal, image tokens their grid's, kiln_batch_inputs.mpos) */
    hp->rope.neox = 1;
    kiln_status st = model_meta_kv(m, "rope.dimension_sections") ? model_rope_sections(m, KERN_IMROPE) : KILN_OK;
    if (st) return st;
    /* experts */
    st = model_moe_read_hparams(m, &h->moe);
    if (st) return st;
    const int n_mtp = h->n_layer_all - h->n_layer;
    h->mtp = n_mtp ? calloc((size_t)n_mtp, sizeof *h->mtp) : NULL;
    h->experts =
        h->moe.n_expert ? calloc((size_t)h->n_layer_all * 3 * (size_t)h->moe.n_expert, sizeof *h->experts) : NULL;
    h->conv_mem = h->n_rec ? malloc((size_t)h->n_rec * (size_t)h->K * (size_t)h->conv_dim * sizeof(float)) : NULL;
    if ((n_mtp && !h->mtp) || (h->moe.n_expert && !h->experts) || (h->n_rec && !h->conv_mem)) {
        return base_fail(KILN_ERR_NOMEM, "out of memory");
    }
    /* tensors */
    const int64_t E = hp->n_embd;
    m->tok_embd = model_bind_mat(&B, "token_embd.weight", E, -1, 0);
    hp->n_vocab = (int)m->tok_embd.nrows;
    m->out_norm = model_bind_vec(&B, "output_norm.weight", E, 0);
    m->output = model_bind_mat(&B, "output.weight", E, hp->n_vocab, 1);
    if (!m->output.data) m->output = m->tok_embd;
    for (int i = 0; i < h->n_layer && !B.st; i++) {
        hyb_layer *l = &h->layers[i];
        char n[96];
        snprintf(n, sizeof n, "blk.%d.attn_norm.weight", i);
        l->attn_norm = model_bind_vec(&B, n, E, 0);
        snprintf(n, sizeof n, "blk.%d.post_attention_norm.weight", i);
        l->post_norm = model_bind_vec(&B, n, E, 0);
        if (l->recurrent)
            bind_recurrent(&B, m, h, i, l, h->conv_mem + (size_t)l->ord * h->K * h->conv_dim);
        else
            bind_attention(&B, m, i, l, 0);
        bind_ffn(&B, m, h, i, l, h->experts ? h->experts + (size_t)i * 3 * h->moe.n_expert : NULL, 0);
    }
    /* MTP blocks: whatever of them the file carries, shapes checked */
    for (int i = h->n_layer; i < h->n_layer_all && !B.st; i++) {
        hyb_mtp *t = &h->mtp[i - h->n_layer];
        char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", i, s), n)
        t->eh_proj = model_bind_mat(&B, NAME("nextn.eh_proj.weight"), 2 * E, E, 1);
        t->enorm = model_bind_vec(&B, NAME("nextn.enorm.weight"), E, 1);
        t->hnorm = model_bind_vec(&B, NAME("nextn.hnorm.weight"), E, 1);
        t->embed_tokens = model_bind_mat(&B, NAME("nextn.embed_tokens.weight"), E, hp->n_vocab, 1);
        t->head = model_bind_mat(&B, NAME("nextn.shared_head_head.weight"), E, hp->n_vocab, 1);
        t->head_norm = model_bind_vec(&B, NAME("nextn.shared_head_norm.weight"), E, 1);
        t->block.attn_norm = model_bind_vec(&B, NAME("attn_norm.weight"), E, 1);
        t->block.post_norm = model_bind_vec(&B, NAME("post_attention_norm.weight"), E, 1);
#undef NAME
        bind_attention(&B, m, i, &t->block, 1);
        bind_ffn(&B, m, h, i, &t->block, h->experts ? h->experts + (size_t)i * 3 * h->moe.n_expert : NULL, 1);
        const hyb_layer *L = &t->block;
        t->complete = t->eh_proj.data && t->enorm && t->hnorm && L->attn_norm && L->post_norm && L->wq.data &&
                      L->wk.data && L->wv.data && L->wo.data && L->q_norm && L->k_norm &&
                      (L->moe ? L->ex.router.data && L->ex.e_gate && L->ex.e_gate[0].data && L->ex.e_down[0].data
                              : L->w_gate.data && L->w_up.data && L->w_down.data);
        t->block.ord = h->n_attn; /* the context's extra attention layer (api.c) */
    }
    if (B.st) return B.st;
    /* a decode step reads one token's experts, not all of them */
    m->active_bytes = model_moe_active_bytes(m, &h->moe, h->n_layer);
    return 0;
}

static void hyb_free(kiln_model *m) {
    hyb_model *h = m->fam;
    if (!h) return;
    free(h->layers);
    free(h->mtp);
    free(h->experts);
    free(h->conv_mem);
    free(h);
}

static void layer_weights(const kiln_model *m, const hyb_model *h, hyb_layer *l, model_weights *w) {
    const model_hparams *hp = &m->hp;
    kern_mat *ms[] = {&l->wq,     &l->wk,  &l->wv,   &l->wo,     &l->wqkv, &l->wz,    &l->wbeta,
                      &l->walpha, &l->wba, &l->wout, &l->w_gate, &l->w_up, &l->w_down};
    for (size_t k = 0; k < sizeof ms / sizeof ms[0]; k++) model_weights_mat(w, ms[k]);
    if (l->moe) model_moe_weights(m, &h->moe, &l->ex, w);
    model_weights_vec(w, &l->attn_norm, hp->n_embd);
    model_weights_vec(w, &l->post_norm, hp->n_embd);
    model_weights_vec(w, &l->q_norm, hp->hd_k);
    model_weights_vec(w, &l->k_norm, hp->hd_k);
    model_weights_vec(w, &l->dt_bias, h->Hv);
    model_weights_vec(w, &l->ssm_a, h->Hv);
    model_weights_vec(w, &l->ssm_norm, h->Dv);
    /* the transposed taps live in conv_mem (heap, not the file): only a
     * backend with memory of its own takes a copy (the CPU's prepare
     * releases the pages its vectors came from) */
    if (l->conv_w && !m->be->host_mem) model_weights_vec(w, &l->conv_w, (int64_t)h->K * h->conv_dim);
}

static void hyb_weights(kiln_model *m, model_weights *w) {
    hyb_model *h = m->fam;
    const int64_t E = m->hp.n_embd;
    model_weights_mat(w, &m->output);
    model_weights_vec(w, &m->out_norm, E);
    for (int i = 0; i < h->n_layer; i++) {
        model_weights_layer(w, i);
        layer_weights(m, h, &h->layers[i], w);
    }
    /* the MTP blocks' own tensors (their shared ones are listed above:
     * mtp_head and friends read them through the model at use) */
    for (int i = 0; i < h->n_layer_all - h->n_layer; i++) {
        hyb_mtp *t = &h->mtp[i];
        layer_weights(m, h, &t->block, w);
        model_weights_mat(w, &t->eh_proj);
        model_weights_mat(w, &t->head);
        model_weights_vec(w, &t->enorm, E);
        model_weights_vec(w, &t->hnorm, E);
        model_weights_vec(w, &t->head_norm, E);
    }
}

/* Floats a recorded run keeps per token and recurrent layer: the
 * convolution's input row, then beta and the log decay per value head. */
static size_t roll_row(const hyb_model *h) { return (size_t)h->conv_dim + 2 * (size_t)h->Hv; }

static int hyb_attn_below(const kiln_model *m, int l) {
    const hyb_model *h = m->fam;
    int n = 0;
    for (int i = 0; i < l && i < h->n_layer; i++) n += !h->layers[i].recurrent;
    return n;
}

static void hyb_seq_shape(const kiln_model *m, model_seq_shape *s) {
    const hyb_model *h = m->fam;
    memset(s, 0, sizeof *s);
    s->n_attn_layer = h->n_attn;
    s->n_head_kv = m->hp.n_head_kv;
    s->hd = m->hp.hd_k;
    s->rs_floats = (size_t)h->n_rec * (h->conv_floats + h->delta_floats);
    s->roll_floats = (size_t)h->n_rec * MODEL_RS_ROLL_MAX * roll_row(h);
}

/* ------------------------------------------------------------ activations */

typedef struct hyb_ws {
    float *x, *xn, *y;
    float *qg, *q, *k, *v, *att;
    float *qkv, *cv, *z, *o, *ba, *beta, *gd;
    float *gate, *up;
    model_moe_ws ex; /* experts */
    /* order and runs */
    int32_t *ord;   /* work row -> batch index */
    int32_t *tmp_i; /* [n] */
    int32_t *run;   /* [n + 1] row where each run of one sequence starts */
    int n_run;
    /* snapshots this pass takes: per run up to HYB_MAX_CAP */
    int32_t *verify;  /* [n] 1: the run is recorded for rollback (state.h) */
    int32_t *cap_n;   /* [n] */
    int32_t *cap_pos; /* [n][HYB_MAX_CAP] */
    float **cap_dst;  /* [n][HYB_MAX_CAP] state slots (backend memory) */
    /* MTP (contexts keeping its cache) */
    float *mcat; /* [n][2 n_embd] the block's input pairs */
    float *mh;   /* [n][n_embd] final hidden states after the output (or head) norm */
} hyb_ws;

#define HYB_MAX_CAP BACKEND_GDN_MAX_CAP

static void hyb_ctx_free(kiln_context *c) {
    hyb_ws *w = c->ws;
    if (w) {
        /* backend memory, then host arrays */
        void *dev[] = {w->x, w->xn, w->y,  w->qg,   w->q,  w->k,    w->v,  w->att,  w->qkv, w->cv,
                       w->z, w->o,  w->ba, w->beta, w->gd, w->gate, w->up, w->mcat, w->mh};
        void *host[] = {w->ord, w->tmp_i, w->run, w->verify, w->cap_n, w->cap_pos, w->cap_dst};
        model_moe_ws_free(c, &w->ex);
        for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
            if (dev[i]) c->bx.ops->free(&c->bx, dev[i]);
        for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
        free(w);
    }
    c->ws = NULL;
}

static int hyb_ctx_init(kiln_context *c) {
    const kiln_model *m = c->m;
    const model_hparams *hp = &m->hp;
    const hyb_model *h = m->fam;
    backend_ctx *X = &c->bx;
    hyb_ws *w = calloc(1, sizeof *w);
    c->ws = w;
    if (!w) return -1;
    const size_t B = (size_t)c->p.n_batch, E = (size_t)hp->n_embd, hd = (size_t)hp->hd_k;
    const size_t nq = (size_t)hp->n_head * hd, nkv = (size_t)hp->n_head_kv * hd;
    const size_t vd = (size_t)h->Hv * h->Dv, CD = (size_t)h->conv_dim, Hv = (size_t)h->Hv;
    const size_t F = h->has_dense ? (size_t)hp->n_ff : 0;
    const size_t mtp = c->mtp_ord >= 0 ? 1 : 0;
    const size_t attn = h->n_attn || mtp ? 1 : 0, rec = h->n_rec ? 1 : 0, moe = h->has_moe ? 1 : 0;
    struct {
        void **p;
        size_t bytes;
        int host;
    } bufs[] = {
        {(void **)&w->x, B * E * 4, 0},
        {(void **)&w->xn, B * E * 4, 0},
        {(void **)&w->y, B * E * 4, 0},
        {(void **)&w->qg, attn * B * 2 * nq * 4, 0},
        {(void **)&w->q, attn * B * nq * 4, 0},
        {(void **)&w->k, attn * B * nkv * 4, 0},
        {(void **)&w->v, attn * B * nkv * 4, 0},
        {(void **)&w->att, attn * B * nq * 4, 0},
        {(void **)&w->qkv, rec * B * CD * 4, 0},
        {(void **)&w->cv, rec * B * CD * 4, 0},
        {(void **)&w->z, rec * B * vd * 4, 0},
        {(void **)&w->o, rec * B * vd * 4, 0},
        {(void **)&w->ba, rec * B * 2 * Hv * 4, 0},
        {(void **)&w->beta, rec * B * Hv * 4, 0},
        {(void **)&w->gd, rec * B * Hv * 4, 0},
        {(void **)&w->gate, B * F * 4, 0},
        {(void **)&w->up, B * F * 4, 0},
        {(void **)&w->ord, B * 4, 1},
        {(void **)&w->tmp_i, B * 4, 1},
        {(void **)&w->run, (B + 1) * 4, 1},
        {(void **)&w->verify, B * 4, 1},
        {(void **)&w->cap_n, B * 4, 1},
        {(void **)&w->cap_pos, B * HYB_MAX_CAP * 4, 1},
        {(void **)&w->cap_dst, B * HYB_MAX_CAP * sizeof(float *), 1},
        {(void **)&w->mcat, mtp * B * 2 * E * 4, 0},
        {(void **)&w->mh, mtp * B * E * 4, 0},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        const size_t bytes = bufs[i].bytes ? bufs[i].bytes : 1;
        if (!(*bufs[i].p = bufs[i].host ? malloc(bytes) : X->ops->alloc(X, bytes))) return -1;
    }
    if (moe && model_moe_ws_init(c, &w->ex, &h->moe, hp->n_embd, c->p.n_batch)) return -1;
    if (rec && X->ops->gdn_reserve(X, h->Dk, h->Dv)) return -1;
    /* matrix products: widest input row and most rows at once */
    size_t maxk = E;
    const size_t cols[] = {nq, vd, F, moe * (size_t)model_moe_mm_cols(&h->moe), mtp * 2 * E};
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++) maxk = cols[i] > maxk ? cols[i] : maxk;
    const size_t rows = moe ? (size_t)model_moe_mm_rows(&h->moe, c->p.n_batch) : B;
    return X->ops->reserve(X, (int64_t)maxk, (int)rows);
}

/* ---------------------------------------------------------------- forward */

/* A layer's work over the batch's n tokens (in run order), every op on
 * the context's backend (backend/backend.h). */
typedef struct hyb_job {
    kiln_context *c;
    const hyb_layer *L;
    int n;
} hyb_job;

/* The Gated DeltaNet core's operands for layer L (backend_gdn). */
static backend_gdn gdn_args(kiln_context *c, const hyb_layer *L) {
    const hyb_model *h = c->m->fam;
    hyb_ws *w = c->ws;
    const model_rs *rs = c->rs;
    return (backend_gdn){
        .Hk = h->Hk,
        .Hv = h->Hv,
        .Dk = h->Dk,
        .Dv = h->Dv,
        .K = h->K,
        .conv_dim = h->conv_dim,
        .ba_grouped = (h->flags & HYB_BA) != 0,
        .kh_grouped = (h->flags & HYB_GROUPED) != 0,
        .eps = c->m->hp.eps,
        .conv_w = L->conv_w,
        .dt_bias = L->dt_bias,
        .ssm_a = L->ssm_a,
        .ssm_norm = L->ssm_norm,
        .qkv = w->qkv,
        .z = w->z,
        .ba = w->ba,
        .beta = w->beta,
        .gd = w->gd,
        .cv = w->cv,
        .o = w->o,
        .state = c->on_lo ? rs->mem_lo : rs->mem, /* a split's host layers: the pool's mirror */
        .slot_floats = rs->slot_floats,
        .conv_off = (size_t)L->ord * (h->conv_floats + h->delta_floats),
        .conv_floats = h->conv_floats,
        .roll = c->on_lo ? model_rs_lo(rs, rs->roll_in) : rs->roll_in,
        .roll_stride = rs->roll_floats,
        .roll_off = (size_t)L->ord * MODEL_RS_ROLL_MAX * roll_row(h),
        .seq = c->b_seq,
        .pos = c->b_pos,
        .run = w->run,
        .n_run = w->n_run,
        .verify = w->verify,
        .cap_n = w->cap_n,
        .cap_pos = w->cap_pos,
        .cap_dst = w->cap_dst,
    };
}

static void recurrent_layer(hyb_job *j) {
    kiln_context *c = j->c;
    backend_ctx *X = &c->bx;
    hyb_ws *w = c->ws;
    const hyb_model *h = c->m->fam;
    const hyb_layer *L = j->L;
    const int n = j->n, vd = h->Hv * h->Dv, Hv2 = 2 * h->Hv;
    if (h->flags & HYB_BA) {
        kern_mm_out o[3] = {{&L->wqkv, w->qkv, h->conv_dim}, {&L->wz, w->z, vd}, {&L->wba, w->ba, Hv2}};
        X->ops->matmul_multi(X, o, 3, w->xn, n);
    } else {
        kern_mm_out o[4] = {{&L->wqkv, w->qkv, h->conv_dim},
                            {&L->wz, w->z, vd},
                            {&L->wbeta, w->ba, Hv2},
                            {&L->walpha, w->ba + h->Hv, Hv2}};
        X->ops->matmul_multi(X, o, 4, w->xn, n);
    }
    const backend_gdn g = gdn_args(c, L);
    X->ops->gdn(X, &g, n);
    X->ops->matmul(X, &L->wout, w->o, n, w->y, c->m->hp.n_embd);
}

static void attention_layer(hyb_job *j) {
    kiln_context *c = j->c;
    backend_ctx *X = &c->bx;
    hyb_ws *w = c->ws;
    const model_hparams *hp = &c->m->hp;
    const hyb_layer *L = j->L;
    const int n = j->n;
    const int64_t nq = (int64_t)hp->n_head * hp->hd_k, nkv = (int64_t)hp->n_head_kv * hp->hd_k;
    kern_mm_out o[3] = {{&L->wq, w->qg, 2 * nq}, {&L->wk, w->k, nkv}, {&L->wv, w->v, nkv}};
    X->ops->matmul_multi(X, o, 3, w->xn, n);
    const backend_qk qk = {
        .q = w->q,
        .k = w->k,
        .v = w->v,
        .qg = w->qg,
        .q_norm = L->q_norm,
        .k_norm = L->k_norm,
        .n_head = hp->n_head,
        .n_head_kv = hp->n_head_kv,
        .hd = hp->hd_k,
        .eps = hp->eps,
        .rope = &hp->rope,
        .layer = L->ord - c->attn_base,
    };
    X->ops->qk_store(X, &qk, n);
    X->ops->attn(X, L->ord - c->attn_base, w->q, w->att, n, NULL);
    X->ops->attn_gate(X, w->att, w->qg, n, hp->n_head, hp->hd_k);
    X->ops->matmul(X, &L->wo, w->att, n, w->y, hp->n_embd);
}

static void dense_ffn(hyb_job *j) {
    kiln_context *c = j->c;
    backend_ctx *X = &c->bx;
    hyb_ws *w = c->ws;
    const model_hparams *hp = &c->m->hp;
    const hyb_layer *L = j->L;
    kern_mm_out gu[2] = {{&L->w_gate, w->gate, hp->n_ff}, {&L->w_up, w->up, hp->n_ff}};
    X->ops->matmul_multi(X, gu, 2, w->xn, j->n);
    X->ops->swiglu(X, w->gate, w->up, j->n, hp->n_ff);
    X->ops->matmul(X, &L->w_down, w->gate, j->n, w->y, hp->n_embd);
}

static void moe_ffn(hyb_job *j) {
    hyb_ws *w = j->c->ws;
    const hyb_model *h = j->c->m->fam;
    model_moe_ffn(j->c, &h->moe, &j->L->ex, &w->ex, w->xn, w->y, j->n);
}

/* One layer: the mixer, then the FFN, each with its residual and norm. */
static void run_layer(hyb_job *j) {
    kiln_context *c = j->c;
    backend_ctx *X = &c->bx;
    hyb_ws *w = c->ws;
    const model_hparams *hp = &c->m->hp;
    const int n = j->n, E = hp->n_embd;
    X->ops->rmsnorm(X, w->xn, w->x, j->L->attn_norm, n, E, hp->eps);
    if (j->L->recurrent)
        recurrent_layer(j);
    else
        attention_layer(j);
    X->ops->add_rmsnorm(X, w->x, w->y, w->xn, j->L->post_norm, n, E, hp->eps); /* x += y, xn = its norm */
    if (j->L->moe)
        moe_ffn(j);
    else
        dense_ffn(j);
    X->ops->add(X, w->x, w->y, n, E);
}

/* ------------------------------------------------------------------ MTP */

/* The MTP block's embedding, head and head norm: its own where the file
 * has them, else the model's (repacked or moved at load, so looked up here
 * rather than copied at bind time). */
static const kern_mat *mtp_embd(const kiln_model *m, const hyb_mtp *t) {
    return t->embed_tokens.data ? &t->embed_tokens : &m->tok_embd;
}
static const kern_mat *mtp_head(const kiln_model *m, const hyb_mtp *t) { return t->head.data ? &t->head : &m->output; }
static const float *mtp_head_norm(const kiln_model *m, const hyb_mtp *t) {
    return t->head_norm ? t->head_norm : m->out_norm;
}

/* Row i's input pair into w->mcat: [rms(emb(tok)) * enorm | rms(hid) *
 * hnorm], hid NULL standing for a zero hidden state. */
static void mtp_pair(kiln_context *c, const hyb_mtp *t, int i, int32_t tok, const float *hid) {
    backend_ctx *X = &c->bx;
    hyb_ws *w = c->ws;
    const int E = c->m->hp.n_embd;
    float *cat = w->mcat + (size_t)i * 2 * E;
    X->ops->get_rows(X, mtp_embd(c->m, t), &tok, 1, cat);
    X->ops->rmsnorm(X, cat, cat, t->enorm, 1, E, c->m->hp.eps);
    if (hid)
        X->ops->rmsnorm(X, cat + E, hid, t->hnorm, 1, E, c->m->hp.eps);
    else
        X->ops->zero(X, cat + E, (size_t)E * sizeof(float)); /* rms(0) * w = 0 */
}

/* The MTP block's keys and values for every token of the batch, in work
 * order (model/mtp.h): cell p of a run gets the pair (h_{p-1}, tok_p), h
 * the target's final hidden state after the output norm, the run's first
 * pair the one kept from the sequence's previous pass.  Only K and V: the
 * cells are what later steps attend to, and the block's output at a
 * target position is never needed.  The runs' hidden rows are then kept
 * (model_mtp_keep) for the next pass and for proposals. */
static void mtp_fill(hyb_job *j, const kiln_batch *b) {
    kiln_context *c = j->c;
    backend_ctx *X = &c->bx;
    hyb_ws *w = c->ws;
    const kiln_model *m = c->m;
    const model_hparams *hp = &m->hp;
    const hyb_model *h = m->fam;
    const hyb_mtp *t = &h->mtp[0];
    const hyb_layer *L = &t->block;
    const int n = j->n, E = hp->n_embd, hd = hp->hd_k, nkv = hp->n_head_kv;
    X->ops->rmsnorm(X, w->mh, w->x, m->out_norm, n, E, hp->eps);
    for (int r = 0; r < w->n_run; r++) {
        const int r0 = w->run[r], r1 = w->run[r + 1];
        const float *prev = model_mtp_hidden(c, c->b_seq[r0], c->b_pos[r0] - 1);
        for (int i = r0; i < r1; i++)
            mtp_pair(c, t, i, b->token[w->ord[i]] < 0 ? 0 : b->token[w->ord[i]], /* image tokens: a stand-in id */
                     i > r0 ? w->mh + (size_t)(i - 1) * E : prev);
    }
    for (int r = 0; r < w->n_run; r++) {
        const int r0 = w->run[r];
        model_mtp_keep(c, c->b_seq[r0], c->b_pos[r0], w->mh + (size_t)r0 * E, w->run[r + 1] - r0);
    }
    X->ops->matmul(X, &t->eh_proj, w->mcat, n, w->y, E);
    X->ops->rmsnorm(X, w->xn, w->y, L->attn_norm, n, E, hp->eps);
    const int64_t nkvd = (int64_t)nkv * hd;
    kern_mm_out o[2] = {{&L->wk, w->k, nkvd}, {&L->wv, w->v, nkvd}};
    X->ops->matmul_multi(X, o, 2, w->xn, n);
    const backend_qk qk = {
        .k = w->k,
        .v = w->v,
        .k_norm = L->k_norm,
        .n_head = hp->n_head,
        .n_head_kv = nkv,
        .hd = hd,
        .eps = hp->eps,
        .rope = &hp->rope,
        .layer = L->ord,
    };
    X->ops->qk_store(X, &qk, n); /* no queries: the keys' norm and RoPE, the store */
}

static int hyb_mtp_blocks(const kiln_model *m) {
    const hyb_model *h = m->fam;
    return h->n_layer_all > h->n_layer && h->mtp[0].complete ? 1 : 0;
}

/* model_mtp_step (model/mtp.h; rows checked and cells reserved by api.c): the
 * whole block over one row per sequence, then the head norm (h', kept for
 * the chain) and the head. */
static kiln_status hyb_mtp_step(kiln_context *c, int n, const int32_t *seq, const int32_t *pos, const int32_t *tok,
                                const uint8_t *chain) {
    const kiln_model *m = c->m;
    const hyb_model *h = m->fam;
    const hyb_mtp *t = &h->mtp[0];
    backend_ctx *X = &c->bx;
    hyb_ws *w = c->ws;
    const int E = m->hp.n_embd;
    for (int r = 0; r < n; r++) {
        c->b_seq[r] = seq[r];
        c->b_pos[r] = pos[r];
        if (c->kv.rnext) { /* the token's text position, as its cell's predecessor says */
            int32_t *mp = c->b_mrope + (size_t)MODEL_MPOS * r;
            mp[0] = mp[1] = mp[2] = mp[3] = model_kv_rope_next(&c->kv, seq[r], pos[r]);
        }
        const float *hid = chain[r] ? c->mtp_chain + (size_t)seq[r] * E : model_mtp_hidden(c, seq[r], pos[r] - 1);
        mtp_pair(c, t, r, tok[r], hid);
    }
    model_attn_prepare(c, n);
    X->ops->matmul(X, &t->eh_proj, w->mcat, n, w->x, E);
    hyb_job j = {c, &t->block, n};
    run_layer(&j);
    X->ops->rmsnorm(X, w->mh, w->x, mtp_head_norm(m, t), n, E, m->hp.eps);
    for (int r = 0; r < n; r++)
        X->ops->copy(X, c->mtp_chain + (size_t)seq[r] * E, w->mh + (size_t)r * E, (size_t)E * sizeof(float));
    X->ops->matmul(X, mtp_head(m, t), w->mh, n, c->mtp_lg_dev, m->hp.n_vocab);
    X->ops->download(X, c->mtp_logits, c->mtp_lg_dev, (size_t)n * (size_t)m->hp.n_vocab * sizeof(float));
    return KILN_OK;
}

/* c->b_mrope's rows into w->ord's order (back: out of it), through
 * w->tmp_i one component at a time. */
static void permute_mpos(kiln_context *c, hyb_ws *w, int n, int back) {
    for (int k = 0; k < MODEL_MPOS; k++) {
        for (int i = 0; i < n; i++) {
            if (back)
                w->tmp_i[w->ord[i]] = c->b_mrope[(size_t)MODEL_MPOS * i + k];
            else
                w->tmp_i[i] = c->b_mrope[(size_t)MODEL_MPOS * w->ord[i] + k];
        }
        for (int i = 0; i < n; i++) c->b_mrope[(size_t)MODEL_MPOS * i + k] = w->tmp_i[i];
    }
}

/* A split model: the batch's order, runs and capture plan (made in the GPU
 * part's activations, from) copied to the host part's (to), captures into
 * the state pool's mirror. */
static void split_meta(kiln_context *c, hyb_ws *to, const hyb_ws *from, int n) {
    const size_t nr = (size_t)from->n_run;
    memcpy(to->ord, from->ord, (size_t)n * sizeof(int32_t));
    memcpy(to->run, from->run, (nr + 1) * sizeof(int32_t));
    to->n_run = from->n_run;
    memcpy(to->verify, from->verify, nr * sizeof(int32_t));
    memcpy(to->cap_n, from->cap_n, nr * sizeof(int32_t));
    memcpy(to->cap_pos, from->cap_pos, nr * HYB_MAX_CAP * sizeof(int32_t));
    for (size_t r = 0; r < nr; r++)
        for (int k = 0; k < from->cap_n[r]; k++)
            to->cap_dst[r * HYB_MAX_CAP + k] = model_rs_lo(c->rs, from->cap_dst[r * HYB_MAX_CAP + k]);
}

static kiln_status hyb_forward(kiln_context *c, const kiln_batch *b, int n_out) {
    const kiln_model *m = c->m;
    const hyb_model *h = m->fam;
    backend_ctx *X = &c->bx;
    hyb_ws *w = c->ws;
    const int n = b->n, E = m->hp.n_embd;
    const int moved = model_batch_seq_runs(c, n, w->ord, w->tmp_i, w->run, &w->n_run);
    if (moved && c->kv.rnext) permute_mpos(c, w, n, 0);
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
            w->cap_n[r] = model_rs_plan(c, seq, c->b_pos[r0], c->b_pos[r0] + len, w->cap_pos + (size_t)r * HYB_MAX_CAP,
                                        w->cap_dst + (size_t)r * HYB_MAX_CAP, HYB_MAX_CAP);
    }
    if (h->n_attn || c->mtp_ord >= 0) model_attn_prepare(c, n);
    if (c->b_embd && !m->be->host_mem)
        return model_fail(c, KILN_ERR_UNSUPPORTED, "image rows on the %s backend", m->be->name);
    /* a split model: the embeddings and the first layers on the host part,
     * with the batch's order, runs and captures */
    const int l0 = model_split_enter(c);
    if (l0 >= 0) {
        split_meta(c, c->ws, c->ws_lo, n);
        X = &c->bx;
        w = c->ws;
    }
    for (int i = 0; i < n; i++) w->tmp_i[i] = b->token[w->ord[i]] < 0 ? 0 : b->token[w->ord[i]];
    X->ops->get_rows(X, &m->tok_embd, w->tmp_i, n, w->x);
    for (int i = 0; c->b_embd && i < n; i++) /* image tokens: their rows as given (batch order -> run order) */
        if (b->token[w->ord[i]] < 0)
            memcpy(w->x + (size_t)i * E, c->b_embd + (size_t)w->ord[i] * m->hp.n_embd_inp, (size_t)E * sizeof(float));
    hyb_job j = {c, NULL, n};
    for (int l = 0; l < h->n_layer; l++) {
        if (l == l0) { /* the residual rows up to the GPU's part */
            const float *xh = w->x;
            model_split_swap(c);
            X = &c->bx;
            w = c->ws;
            X->ops->upload(X, w->x, xh, (size_t)n * E * sizeof(float));
        }
        j.L = &h->layers[l];
        run_layer(&j);
    }
    if (c->mtp_ord >= 0) mtp_fill(&j, b);
    model_batch_commit(c, n);
    const float *xo = w->x;
    if (moved) { /* back to batch order for the output rows (and b_seq / b_pos) */
        X->ops->scatter_rows(X, w->xn, w->x, w->ord, n, E);
        xo = w->xn;
        model_batch_seq_restore(c, n, w->ord, w->tmp_i);
        if (c->kv.rnext) permute_mpos(c, w, n, 1);
    }
    if (l0 >= 0) { /* and back down for the head */
        model_split_swap(c);
        hyb_ws *wl = c->ws;
        c->bx_lo.ops->download(&c->bx_lo, wl->x, xo, (size_t)n * E * sizeof(float));
        model_batch_output(c, wl->x, n, n_out);
        model_split_swap(c);
        return KILN_OK;
    }
    model_batch_output(c, xo, n, n_out);
    return KILN_OK;
}

/* model_family.replay: the recorded inputs of seq's last run through each
 * recurrent layer's convolution and delta rule, token by token as the run
 * computed them, up to n tokens (outputs dropped). */
static void hyb_replay(kiln_context *c, int seq, int32_t n) {
    const hyb_model *h = c->m->fam;
    const int l0 = model_split_enter(c); /* a split: the host part's layers first */
    for (int l = 0; l < h->n_layer; l++) {
        const hyb_layer *L = &h->layers[l];
        if (l == l0) model_split_swap(c);
        if (!L->recurrent) continue;
        const backend_gdn g = gdn_args(c, L);
        c->bx.ops->gdn_replay(&c->bx, &g, seq, n);
    }
}

const model_family model_family_hybrid = {
    .name = "hybrid",
    .archs = k_archs,
    .n_archs = sizeof k_archs / sizeof k_archs[0],
    .image_input = 1,
    .bind = hyb_bind,
    .free = hyb_free,
    .weights = hyb_weights,
    .seq_shape = hyb_seq_shape,
    .attn_below = hyb_attn_below,
    .ctx_init = hyb_ctx_init,
    .ctx_free = hyb_ctx_free,
    .forward = hyb_forward,
    .replay = hyb_replay,
    .mtp_blocks = hyb_mtp_blocks,
    .mtp_step = hyb_mtp_step,
};
