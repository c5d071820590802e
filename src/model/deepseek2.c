/*
 * The deepseek2 family: DeepSeek-V2/V2.5/V3's multi-head latent attention
 * (MLA) in its absorbed form, the first leading_dense_block_count layers
 * with a SwiGLU FFN and the rest with routed experts plus a shared one.
 * With R = kv_lora_rank, Dn + Dr = key_length_mla (no-rope and rope parts
 * of a query head), Dv = value_length_mla and H heads, a layer is
 *
 *   xn = rms(x) * attn_norm
 *   q  = Wq_b (rms(Wq_a xn) * q_a_norm)  (or Wq xn)     [H][Dn | Dr]
 *   c  = Wkv_a xn                                       [R | Dr]
 *   latent = rms(c[0:R]) * kv_a_norm,  k_rope = rope(c[R:])  (shared by the heads)
 *   per head h:  q_h' = [Wk_b,h q_h[0:Dn] | rope(q_h[Dn:])]   (R + Dr values)
 *                o_h  = sum_t softmax_t(q_h' . [latent_t | k_rope_t] * scale) latent_t
 *   x += Wo [Wv_b,h o_h]_h
 *   x += FFN(rms(x) * ffn_norm)
 *
 * so the KV cache holds one row of R + Dr values per token and layer
 * ([latent | k_rope], one KV head) and no V: the values are the first R
 * elements of the same rows (model_seq_shape.v_in_k).  Attention runs over the
 * whole rows as one multi-query head of R + Dr and keeps the first R of each
 * output, which are the same bits a value width of R gives (every output
 * element is its own weighted sum).
 *
 * RoPE is the "normal" pairing (2i, 2i+1) over Dr dims, with the file's
 * YaRN; when rope.scaling.yarn_log_multiplier is set (stored as 0.1 x
 * mscale_all_dim) the cos/sin magnitude is 1 and the scores are scaled by
 * mscale^2 / sqrt(Dn + Dr), mscale = 1 + 0.1 mscale_all_dim ln(factor), as
 * llama.cpp computes them.
 *
 * The MoE FFN is model/moe.h's: softmax (V2) or sigmoid (V3,
 * expert_gating_func 2) over the router's logits, the top expert_used_count
 * (V3: by probability + exp_probs_b, within the best expert groups),
 * renormalized only if expert_weights_norm, times expert_weights_scale, plus
 * the shared expert (expert_shared_count x expert width) added ungated.
 * Multi-token-prediction blocks (nextn_predict_layers, the last blocks) are
 * left out: they neither run nor take a cache.
 *
 * Files from before attn_kv_b was split into attn_k_b / attn_v_b (no *_mla
 * keys; key_length Dn + Dr, value_length Dv) run the same absorbed form:
 * Wv_b,h are row views of attn_kv_b and Wk_b,h an F16 copy of its k rows
 * transposed, made at load.  llama.cpp runs such files unabsorbed (full K
 * and V per head in its cache), the same attention up to rounding.
 *
 * Shapes of the activations (per token row):
 *   x, xn  [n_embd]          residual stream and its normalized copy
 *   qa     [q_lora_rank]     the query's compressed form
 *   q      [H][Dn + Dr]      the query heads as projected
 *   kv     [R + Dr]          this token's cache row before caching
 *   qf     [H][R + Dr]       the absorbed query heads attention takes
 *   att    [H][R + Dr]       attention's output (the first R per head used)
 *   vo     [H * Dv]          the heads' values, Wo's input
 *   gate, up [n_ff]          feed-forward (dense layers)
 *   y      [n_embd]          the FFN's output (MoE layers)
 * and, grouped head by head for the per-head products (row h * n + i):
 *   qn     [H * n][Dn]       the no-rope query parts
 *   al     [H * n][R]        the attention outputs' latent parts
 * Every buffer is sized for n_batch tokens when the context is made.
 */
#include "model/decoder.h"
#include "model/moe.h"
#include "quant/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const model_arch k_archs[] = {
    {"deepseek2", &model_family_deepseek2, 0, 0}, /* DeepSeek-V2, V2.5, V3, R1 */
};

typedef struct ds_layer {
    const float *attn_norm;        /* [n_embd] */
    kern_mat wq_a, wq_b, wq;       /* n_embd -> Q -> H*(Dn+Dr), or n_embd -> H*(Dn+Dr) */
    const float *q_a_norm;         /* [Q] */
    kern_mat wkv_a;                /* n_embd -> R + Dr */
    const float *kv_a_norm;        /* [R] */
    kern_mat *wk_b, *wv_b;         /* [H] views: Dn -> R, R -> Dv */
    kern_mat wo;                   /* H*Dv -> n_embd */
    const float *ffn_norm;         /* [n_embd] */
    kern_mat w_gate, w_up, w_down; /* dense layers: n_embd -> n_ff -> n_embd */
    model_moe_layer ex;            /* the other layers */
} ds_layer;

typedef struct ds_model {
    ds_layer *layers;
    model_moe_hp moe;
    kern_mat *experts; /* [n_layer][3][n_expert] views of the expert tensors */
    kern_mat *heads;   /* [n_layer][2][n_head] views of attn_k_b, attn_v_b */
    int n_layer;       /* the layers that run: block_count less the MTP (nextn) blocks, which are not */
    int n_dense;       /* leading layers with a dense FFN */
    int q_rank, r;     /* q_lora_rank (0: plain attn_q), kv_lora_rank */
    int dn, dr, dv;    /* per head: no-rope and rope query parts, value width */
    int legacy;        /* one attn_kv_b per layer: Wk_b transposed into kb_mem, Wv_b row views */
    uint16_t *kb_mem;  /* legacy: [n_layer][H][R][Dn] F16 */
    float kq_scale;    /* the attention's score scale */
} ds_model;

/* ---------------------------------------------------------------- binding */

/* A file from before attn_kv_b was split: per head, Dn rows that map the
 * latent to k_nope, then Dv rows that map it to v (R columns each).  Wv_b,h
 * is a view of the v rows; Wk_b,h (R rows of Dn, the k rows transposed) is
 * copied in F16 into d->kb_mem, which the caller sized. */
static void ds_bind_kv_b(model_binder *B, ds_model *d, int H, int il, ds_layer *l) {
    char n[96];
    snprintf(n, sizeof n, "blk.%d.attn_kv_b.weight", il);
    const int64_t per = (int64_t)d->dn + d->dv;
    const kern_mat kv = model_bind_mat(B, n, d->r, H * per, 0);
    if (!kv.data) return;
    const quant_traits *t = quant_get(kv.type);
    const size_t rs = quant_row_size(kv.type, d->r);
    float *row = malloc((size_t)d->r * sizeof(float));
    if (!row || !t->to_f32) {
        free(row);
        model_bind_fail(B, "%s: out of memory or an unreadable type", n);
        return;
    }
    uint16_t *kb = d->kb_mem + (size_t)il * H * d->r * d->dn;
    for (int h = 0; h < H; h++) {
        uint16_t *kh = kb + (size_t)h * d->r * d->dn;
        for (int j = 0; j < d->dn; j++) {
            t->to_f32((const uint8_t *)kv.data + (size_t)(h * per + j) * rs, row, d->r);
            for (int r = 0; r < d->r; r++) kh[(size_t)r * d->dn + j] = quant_f32_to_f16(row[r]);
        }
        l->wk_b[h] = (kern_mat){kh, QUANT_F16, d->dn, d->r, NULL};
        l->wv_b[h] = (kern_mat){(const uint8_t *)kv.data + (size_t)(h * per + d->dn) * rs, kv.type, d->r, d->dv, NULL};
    }
    free(row);
}

static kiln_status ds_bind(kiln_model *m) {
    model_hparams *hp = &m->hp;
    ds_model *d = calloc(1, sizeof *d);
    m->fam = d;
    if (!d) { return base_fail(KILN_ERR_NOMEM, "out of memory"); }
    const int H = hp->n_head;
    d->q_rank = (int)model_meta_int(m, "attention.q_lora_rank", 0);
    d->r = (int)model_meta_int(m, "attention.kv_lora_rank", 0);
    d->dr = hp->rope.n_rot;
    /* files from before the split of attn_kv_b (no *_mla keys) give the
     * head sizes in key_length / value_length */
    d->legacy = !model_meta_kv(m, "attention.key_length_mla") && !model_meta_kv(m, "attention.value_length_mla");
    const int dk = d->legacy ? hp->hd_k : (int)model_meta_int(m, "attention.key_length_mla", 0);
    d->dv = d->legacy ? hp->hd_v : (int)model_meta_int(m, "attention.value_length_mla", 0);
    d->dn = dk - d->dr;
    d->n_dense = (int)model_meta_int(m, "leading_dense_block_count", 0);
    const int64_t nextn = model_meta_int(m, "nextn_predict_layers", 0);
    if (nextn < 0 || nextn >= hp->n_layer) {
        return base_fail(KILN_ERR_FORMAT, "bad nextn_predict_layers %lld for %d blocks", (long long)nextn, hp->n_layer);
    }
    d->n_layer = hp->n_layer - (int)nextn;
    if (d->q_rank < 0 || d->q_rank > (1 << 16) || d->r <= 0 || d->r > (1 << 16) || d->dn < 1 || dk > 4096 ||
        d->dv <= 0 || d->dv > 4096 ||
        (!d->legacy && (hp->n_head_kv != 1 || hp->hd_k != d->r + d->dr || hp->hd_v != d->r)) || d->n_dense < 0 ||
        d->n_dense > d->n_layer) {
        return base_fail(
            KILN_ERR_FORMAT,
            "bad MLA hyperparameters (q_lora_rank %d, kv_lora_rank %d, key_length_mla %d, value_length_mla %d, "
            "rope dims %d, head_count_kv %d, key_length %d, value_length %d, leading_dense_block_count %d)",
            d->q_rank, d->r, dk, d->dv, d->dr, hp->n_head_kv, hp->hd_k, hp->hd_v, d->n_dense);
    }
    if (d->n_dense > 0 && hp->n_ff <= 0) {
        return base_fail(KILN_ERR_FORMAT, "bad or missing feed_forward_length (%d)", hp->n_ff);
    }
    if (d->n_dense < d->n_layer) {
        kiln_status st = model_moe_read_hparams(m, &d->moe);
        if (st) return st;
        const int64_t n_shared = model_meta_int(m, "expert_shared_count", 0);
        if (!d->moe.n_expert || n_shared < 0 || n_shared > 64) {
            return base_fail(KILN_ERR_FORMAT, "bad expert_count %d / expert_shared_count %lld", d->moe.n_expert,
                             (long long)n_shared);
        }
        d->moe.F_sh = (int)(d->moe.F_exp * n_shared);
        d->moe.w_norm = model_meta_int(m, "expert_weights_norm", 0) != 0;
        d->moe.sh_ungated = 1;
        d->moe.probs_b = 1;
        d->experts = calloc((size_t)d->n_layer * 3 * (size_t)d->moe.n_expert, sizeof *d->experts);
        if (!d->experts) { return base_fail(KILN_ERR_NOMEM, "out of memory"); }
    }
    /* RoPE: normal pairs; with the log multiplier llama.cpp makes the
     * cos/sin magnitude 1 and moves mscale into the attention scale */
    kern_rope *rope = &hp->rope;
    rope->neox = 0;
    const float ln_f = logf(1.0f / rope->freq_scale);
    const float log_mul = (float)model_meta_float(m, "rope.scaling.yarn_log_multiplier", 0.0) / 0.1f;
    if (rope->ext_factor != 0.0f && log_mul != 0.0f)
        rope->attn_factor = (float)model_meta_float(m, "rope.scaling.attn_factor", 1.0) / (1.0f + 0.1f * ln_f);
    const float mag = rope->attn_factor * (1.0f + 0.1f * ln_f);
    const float mscale = mag * (1.0f + 0.1f * log_mul * ln_f);
    d->kq_scale = mscale * mscale / sqrtf((float)dk);
    if (!isfinite(d->kq_scale) || !(d->kq_scale > 0.0f)) {
        return base_fail(KILN_ERR_FORMAT, "bad rope scaling (attention scale %g)", (double)d->kq_scale);
    }
    d->layers = calloc((size_t)d->n_layer, sizeof *d->layers);
    d->heads = calloc((size_t)d->n_layer * 2 * (size_t)H, sizeof *d->heads);
    if (d->legacy) d->kb_mem = malloc((size_t)d->n_layer * H * d->r * d->dn * sizeof(uint16_t));
    if (!d->layers || !d->heads || (d->legacy && !d->kb_mem)) { return base_fail(KILN_ERR_NOMEM, "out of memory"); }

    model_binder B = {m, KILN_OK};
    const int64_t E = hp->n_embd, nq = (int64_t)H * dk;
    m->tok_embd = model_bind_mat(&B, "token_embd.weight", E, -1, 0);
    hp->n_vocab = (int)m->tok_embd.nrows;
    m->out_norm = model_bind_vec(&B, "output_norm.weight", E, 0);
    m->output = model_bind_mat(&B, "output.weight", E, hp->n_vocab, 1);
    if (!m->output.data) m->output = m->tok_embd; /* tied embeddings */
    for (int i = 0; i < d->n_layer && !B.st; i++) {
        ds_layer *l = &d->layers[i];
        char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", i, s), n)
        l->attn_norm = model_bind_vec(&B, NAME("attn_norm.weight"), E, 0);
        if (d->q_rank) {
            l->wq_a = model_bind_mat(&B, NAME("attn_q_a.weight"), E, d->q_rank, 0);
            l->q_a_norm = model_bind_vec(&B, NAME("attn_q_a_norm.weight"), d->q_rank, 0);
            l->wq_b = model_bind_mat(&B, NAME("attn_q_b.weight"), d->q_rank, nq, 0);
        } else {
            l->wq = model_bind_mat(&B, NAME("attn_q.weight"), E, nq, 0);
        }
        l->wkv_a = model_bind_mat(&B, NAME("attn_kv_a_mqa.weight"), E, d->r + d->dr, 0);
        l->kv_a_norm = model_bind_vec(&B, NAME("attn_kv_a_norm.weight"), d->r, 0);
        l->wk_b = d->heads + (size_t)i * 2 * H;
        l->wv_b = l->wk_b + H;
        if (d->legacy)
            ds_bind_kv_b(&B, d, H, i, l);
        else {
            model_bind_mats3(&B, NAME("attn_k_b.weight"), d->dn, d->r, H, l->wk_b, 0);
            model_bind_mats3(&B, NAME("attn_v_b.weight"), d->r, d->dv, H, l->wv_b, 0);
        }
        l->wo = model_bind_mat(&B, NAME("attn_output.weight"), (int64_t)H * d->dv, E, 0);
        l->ffn_norm = model_bind_vec(&B, NAME("ffn_norm.weight"), E, 0);
        if (i >= d->n_dense) {
            model_moe_bind(&B, m, &d->moe, i, &l->ex, d->experts + (size_t)i * 3 * d->moe.n_expert);
            if (d->moe.F_sh && !B.st && !l->ex.s_up.data)
                model_bind_fail(&B, "layer %d: expert_shared_count without ffn_up_shexp", i);
            continue;
        }
        l->w_gate = model_bind_mat(&B, NAME("ffn_gate.weight"), E, hp->n_ff, 0);
        l->w_up = model_bind_mat(&B, NAME("ffn_up.weight"), E, hp->n_ff, 0);
        l->w_down = model_bind_mat(&B, NAME("ffn_down.weight"), hp->n_ff, E, 0);
#undef NAME
    }
    if (B.st) return B.st;
    /* a decode step reads one token's experts, not all of them */
    if (d->moe.n_expert) m->active_bytes = model_moe_active_bytes(m, &d->moe, d->n_layer);
    return 0;
}

static void ds_free(kiln_model *m) {
    ds_model *d = m->fam;
    if (!d) return;
    free(d->layers);
    free(d->experts);
    free(d->heads);
    free(d->kb_mem);
    free(d);
}

static void ds_weights(kiln_model *m, model_weights *w) {
    const model_hparams *hp = &m->hp;
    ds_model *d = m->fam;
    model_weights_mat(w, &m->output);
    model_weights_vec(w, &m->out_norm, hp->n_embd);
    for (int i = 0; i < d->n_layer; i++) {
        ds_layer *l = &d->layers[i];
        kern_mat *ms[] = {&l->wq_a, &l->wq_b, &l->wq, &l->wkv_a, &l->wo, &l->w_gate, &l->w_up, &l->w_down};
        for (size_t k = 0; k < sizeof ms / sizeof ms[0]; k++) model_weights_mat(w, ms[k]);
        for (int h = 0; h < hp->n_head; h++) {
            model_weights_mat(w, &l->wk_b[h]);
            model_weights_mat(w, &l->wv_b[h]);
        }
        if (i >= d->n_dense) model_moe_weights(m, &d->moe, &l->ex, w);
        const float **v[] = {&l->attn_norm, &l->ffn_norm, &l->q_a_norm, &l->kv_a_norm};
        const int64_t vl[] = {hp->n_embd, hp->n_embd, d->q_rank, d->r};
        for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) model_weights_vec(w, v[k], vl[k]);
    }
}

static void ds_seq_shape(const kiln_model *m, model_seq_shape *s) {
    const ds_model *d = m->fam;
    memset(s, 0, sizeof *s);
    s->n_attn_layer = d->n_layer;
    s->n_head_kv = 1;
    s->hd = d->r + d->dr;
    s->v_in_k = 1;
}

/* ------------------------------------------------------------ activations */

typedef struct ds_ws {
    float *x, *xn, *qa, *q, *kv, *qn, *qf, *att, *al, *vo, *gate, *up, *y;
    model_moe_ws ex;
    kern_mm_out *outs; /* [n_head] per-head products */
    int32_t *t0, *nt;
} ds_ws;

static void ds_ctx_free(kiln_context *c) {
    ds_ws *w = c->ws;
    if (w) {
        float *bufs[] = {w->x, w->xn, w->qa, w->q, w->kv, w->qn, w->qf, w->att, w->al, w->vo, w->gate, w->up, w->y};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
        model_moe_ws_free(c, &w->ex);
        free(w->outs);
        free(w->t0);
        free(w->nt);
        free(w);
    }
    free(c->mm_scratch);
    c->ws = c->mm_scratch = NULL;
}

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

static int ds_ctx_init(kiln_context *c) {
    const model_hparams *hp = &c->m->hp;
    const ds_model *d = c->m->fam;
    ds_ws *w = calloc(1, sizeof *w);
    c->ws = w;
    if (!w) return -1;
    const size_t moe = d->moe.n_expert ? 1 : 0, dense = d->n_dense > 0;
    const size_t B = (size_t)c->p.n_batch, E = (size_t)hp->n_embd, H = (size_t)hp->n_head;
    const size_t F = dense ? (size_t)hp->n_ff : 0, row = (size_t)(d->r + d->dr);
    const size_t dk = (size_t)(d->dn + d->dr);
    struct {
        float **p;
        size_t n;
    } bufs[] = {
        {&w->x, B * E},
        {&w->xn, B * E},
        {&w->qa, B * (size_t)d->q_rank},
        {&w->q, B * H * dk},
        {&w->kv, B * row},
        {&w->qn, B * H * (size_t)d->dn},
        {&w->qf, B * H * row},
        {&w->att, B * H * row},
        {&w->al, B * H * (size_t)d->r},
        {&w->vo, B * H * (size_t)d->dv},
        {&w->gate, B * F},
        {&w->up, B * F},
        {&w->y, moe * B * E},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (!(*bufs[i].p = malloc(bufs[i].n ? bufs[i].n * sizeof(float) : 1))) return -1;
    w->outs = malloc(H * sizeof *w->outs);
    w->t0 = malloc(H * sizeof *w->t0);
    w->nt = malloc(H * sizeof *w->nt);
    if (!w->outs || !w->t0 || !w->nt) return -1;
    if (moe && model_moe_ws_init(c, &w->ex, &d->moe, hp->n_embd, c->p.n_batch)) return -1;
    /* the largest product's scratch: inputs of n_embd, q_lora_rank, H * Dv
     * and n_ff columns over the batch, the per-head ones over H rows per
     * token, the experts' over their routed rows */
    const int nb = c->p.n_batch;
    size_t s = kern_matmul_scratch_size(hp->n_embd, nb);
    s = max_sz(s, kern_matmul_scratch_size(d->q_rank, nb));
    s = max_sz(s, kern_matmul_scratch_size((int64_t)H * d->dv, nb));
    s = max_sz(s, kern_matmul_scratch_size((int64_t)F, nb));
    s = max_sz(s, kern_matmul_scratch_size(d->dn, nb * (int)H));
    s = max_sz(s, kern_matmul_scratch_size(d->r, nb * (int)H));
    if (moe) {
        const int64_t mc = model_moe_mm_cols(&d->moe) > hp->n_embd ? model_moe_mm_cols(&d->moe) : hp->n_embd;
        s = max_sz(s, kern_matmul_scratch_size(mc, model_moe_mm_rows(&d->moe, nb)));
    }
    c->mm_scratch = malloc(s);
    return c->mm_scratch ? 0 : -1;
}

/* ---------------------------------------------------------------- forward */

/* The per-token element-wise steps between the matrix products, over a
 * token range; on the pool when the batch pays for the hand-off. */
enum ds_step {
    STEP_ATTN_NORM,
    STEP_Q_A_NORM,
    STEP_ROPE_STORE,
    STEP_GATHER_LATENT,
    STEP_FFN_NORM,
    STEP_SWIGLU,
    STEP_RESID
};

typedef struct ds_job {
    kiln_context *c;
    const kern_ops *ops;
    const ds_layer *L;
    int layer, n_tok;
    enum ds_step step;
    const float *ffn_out; /* [n_tok][n_embd], added to x by STEP_RESID */
} ds_job;

static void ds_range(const ds_job *j, int i0, int i1) {
    kiln_context *c = j->c;
    ds_ws *w = c->ws;
    const model_hparams *hp = &c->m->hp;
    const ds_model *d = c->m->fam;
    const kern_ops *ops = j->ops;
    const ds_layer *L = j->L;
    const int E = hp->n_embd, H = hp->n_head, n = j->n_tok;
    const int dk = d->dn + d->dr, row = d->r + d->dr;
    for (int i = i0; i < i1; i++) {
        float *x = w->x + (size_t)i * E, *xn = w->xn + (size_t)i * E;
        switch (j->step) {
        case STEP_ATTN_NORM: ops->rmsnorm(xn, x, L->attn_norm, E, hp->eps); break;
        case STEP_Q_A_NORM: {
            float *qa = w->qa + (size_t)i * d->q_rank;
            ops->rmsnorm(qa, qa, L->q_a_norm, d->q_rank, hp->eps);
            break;
        }
        case STEP_ROPE_STORE: {
            /* the cache row: normed latent, roped k_rope; the query heads:
             * no-rope parts grouped by head for Wk_b, roped parts after
             * where the absorbed ones will go */
            float *kv = w->kv + (size_t)i * row, *q = w->q + (size_t)i * H * dk;
            const float *cs = c->rope_cs + (size_t)i * hp->rope.n_rot;
            ops->rmsnorm(kv, kv, L->kv_a_norm, d->r, hp->eps);
            kern_rope_apply(&hp->rope, cs, kv + d->r, 1, d->dr);
            kern_rope_apply(&hp->rope, cs, q + d->dn, H, dk);
            for (int h = 0; h < H; h++) {
                memcpy(w->qn + ((size_t)h * n + i) * d->dn, q + (size_t)h * dk, (size_t)d->dn * sizeof(float));
                memcpy(w->qf + ((size_t)i * H + h) * row + d->r, q + (size_t)h * dk + d->dn,
                       (size_t)d->dr * sizeof(float));
            }
            model_attn_store(c, j->layer, i, kv, NULL);
            break;
        }
        case STEP_GATHER_LATENT:
            for (int h = 0; h < H; h++)
                memcpy(w->al + ((size_t)h * n + i) * d->r, w->att + ((size_t)i * H + h) * row,
                       (size_t)d->r * sizeof(float));
            break;
        case STEP_FFN_NORM: /* x += attention output (in xn), then normalize */
            ops->add(x, xn, E);
            ops->rmsnorm(xn, x, L->ffn_norm, E, hp->eps);
            break;
        case STEP_SWIGLU: ops->swiglu(w->gate + (size_t)i * hp->n_ff, w->up + (size_t)i * hp->n_ff, hp->n_ff); break;
        case STEP_RESID: ops->add(x, j->ffn_out + (size_t)i * E, E); break;
        }
    }
}

static void ds_task(void *ud, int ith, int nth) {
    const ds_job *j = ud;
    long lo, hi;
    thread_pool_range(j->n_tok, ith, nth, &lo, &hi);
    ds_range(j, (int)lo, (int)hi);
}

/* Batches below this many tokens do the element-wise steps on the calling
 * thread: a pool hand-off costs about as much as a few tokens' work. */
#define DS_PAR_MIN 4

static void ds_step(ds_job *j, enum ds_step step) {
    j->step = step;
    if (j->n_tok >= DS_PAR_MIN)
        thread_pool_run(j->c->pool, ds_task, j);
    else
        ds_range(j, 0, j->n_tok);
}

/* Head h's product Ws[h] over rows h * n .. h * n + n - 1 of x (grouped by
 * head), its token i's output at y + (i * H + h) * ldh. */
static void ds_heads(kiln_context *c, const kern_mat *ws, const float *x, int n, float *y, int64_t ldh) {
    ds_ws *w = c->ws;
    const int H = c->m->hp.n_head;
    for (int h = 0; h < H; h++) {
        w->outs[h] = (kern_mm_out){&ws[h], y + (size_t)h * ldh, (int64_t)H * ldh};
        w->t0[h] = h * n;
        w->nt[h] = n;
    }
    for (int a = 0; a < H; a += KERN_MM_MAX_OUTS)
        kern_matmul_ranges(c->pool, w->outs + a, w->t0 + a, w->nt + a,
                           H - a < KERN_MM_MAX_OUTS ? H - a : KERN_MM_MAX_OUTS, x, H * n, c->mm_scratch);
}

static kiln_status ds_forward(kiln_context *c, const kiln_batch *b, int n_out) {
    const kiln_model *m = c->m;
    const model_hparams *hp = &m->hp;
    const ds_model *d = m->fam;
    ds_ws *w = c->ws;
    const int n = b->n, E = hp->n_embd, H = hp->n_head;
    const int64_t nq = (int64_t)H * (d->dn + d->dr), row = d->r + d->dr;
    const kern_ops *ops = kern_ops_best();

    model_attn_prepare(c, n);
    for (int i = 0; i < n; i++) kern_get_row(&m->tok_embd, b->token[i], w->x + (size_t)i * E);

    for (int l = 0; l < d->n_layer; l++) {
        const ds_layer *L = &d->layers[l];
        const int moe = l >= d->n_dense;
        ds_job j = {c, ops, L, l, n, STEP_ATTN_NORM, moe ? w->y : w->xn};
        ds_step(&j, STEP_ATTN_NORM);
        if (d->q_rank) {
            kern_mm_out a[2] = {{&L->wq_a, w->qa, d->q_rank}, {&L->wkv_a, w->kv, row}};
            kern_matmul_multi(c->pool, a, 2, w->xn, n, c->mm_scratch);
            ds_step(&j, STEP_Q_A_NORM);
            kern_matmul(c->pool, &L->wq_b, w->qa, n, w->q, nq, c->mm_scratch);
        } else {
            kern_mm_out a[2] = {{&L->wq, w->q, nq}, {&L->wkv_a, w->kv, row}};
            kern_matmul_multi(c->pool, a, 2, w->xn, n, c->mm_scratch);
        }
        ds_step(&j, STEP_ROPE_STORE);
        ds_heads(c, L->wk_b, w->qn, n, w->qf, row); /* q_h' = Wk_b,h q_nope,h, ahead of its rope part */
        const model_attn_opts ao = {.scale = d->kq_scale};
        model_attn_run_opts(c, l, w->qf, w->att, n, &ao);
        ds_step(&j, STEP_GATHER_LATENT);
        ds_heads(c, L->wv_b, w->al, n, w->vo, d->dv);
        kern_matmul(c->pool, &L->wo, w->vo, n, w->xn, E, c->mm_scratch);
        ds_step(&j, STEP_FFN_NORM);
        if (moe) {
            model_moe_ffn(c, &d->moe, &L->ex, &w->ex, w->xn, w->y, n);
            ds_step(&j, STEP_RESID);
            continue;
        }
        kern_mm_out gu[2] = {{&L->w_gate, w->gate, hp->n_ff}, {&L->w_up, w->up, hp->n_ff}};
        kern_matmul_multi(c->pool, gu, 2, w->xn, n, c->mm_scratch);
        ds_step(&j, STEP_SWIGLU);
        kern_matmul(c->pool, &L->w_down, w->gate, n, w->xn, E, c->mm_scratch);
        ds_step(&j, STEP_RESID);
    }

    model_batch_commit(c, n);
    model_batch_output(c, w->x, n, n_out);
    return KILN_OK;
}

const model_family model_family_deepseek2 = {
    .name = "deepseek2",
    .archs = k_archs,
    .n_archs = sizeof k_archs / sizeof k_archs[0],
    .split_head_sizes = 1,
    .bind = ds_bind,
    .free = ds_free,
    .weights = ds_weights,
    .seq_shape = ds_seq_shape,
    .ctx_init = ds_ctx_init,
    .ctx_free = ds_ctx_free,
    .forward = ds_forward,
};
