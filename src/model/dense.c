/*
 * The decoder family of plain transformer layers: llama, qwen2, qwen3,
 * qwen3moe (qwen3's attention with a mixture-of-experts FFN), phi3 and
 * mistral3 (llama's layout with YaRN and a query temperature).  Every layer
 * is
 *
 *   x += Wo attn(rope(norm_q(Wq xn + bq)), rope(norm_k(Wk xn + bk)), Wv xn + bv),  xn = rms(x) * attn_norm
 *   x += Wdown (silu(Wgate xn) * Wup xn),                                            xn = rms(x) * ffn_norm
 *
 * with the biases and q/k norms where the architecture has them; qwen3moe's
 * FFN is model/moe.h's: the router's softmax, its top expert_used_count
 * renormalized to sum 1, those experts' SwiGLUs weighted, no shared expert.
 * phi3 stores Wq|Wk|Wv as one attn_qkv (rows: all of Q, then K, then V) or
 * as three, and Wgate|Wup as one ffn_up of 2*n_ff rows (gate first); its
 * RoPE rotates the first rope.dimension_count dims of each head, divides
 * the angles by the rope_factors_short/long tensors (LongRoPE: long when a
 * sequence's context exceeds rope.scaling.original_context_length) and
 * multiplies cos and sin by rope.scaling.attn_factor.  It declares an
 * attention.sliding_window that llama.cpp does not apply, and neither do we.
 * mistral3 multiplies the roped queries at position p by
 * 1 + attention.temperature_scale * ln(floor(p / n_ctx_orig) + 1)
 * (kern_attn_temp with offset 0; keys unscaled).
 * qwen2vl and qwen3vl (qwen3vlmoe) are qwen2 and qwen3 (qwen3moe) with
 * M-RoPE: each angle pair takes the t, h or w position of its section
 * (kern_rope; text tokens have all equal, which is plain NeoX RoPE), image
 * tokens their grid's (kiln_batch_inputs.mpos).  Qwen3-VL's deepstack image rows
 * are wider than n_embd (hp.n_embd_inp); text rows add nothing to them.
 * Shapes of the activations (per token row):
 *   x, xn  [n_embd]          residual stream and its normalized copy
 *   q, att [n_head * hd]     queries, attention output (n_head * hd need not be n_embd)
 *   k, v   [n_head_kv * hd]  this batch's keys/values before caching
 *   gate, up [n_ff]          feed-forward (dense)
 *   y      [n_embd]          the FFN's output (MoE)
 * Every buffer is sized for n_batch tokens when the context is made, so a
 * decode step allocates nothing.
 */
#include "model/decoder.h"
#include "model/moe.h"
#include "quant/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    DENSE_NEOX = 1,       /* RoPE pairs (i, i + n_rot/2) instead of (2i, 2i+1) */
    DENSE_QKV_BIAS = 2,   /* Q/K/V biases required (otherwise used when present) */
    DENSE_QK_NORM = 4,    /* per-head RMSNorm of Q and K before RoPE */
    DENSE_MOE = 8,        /* every FFN routes to experts (ffn_gate_inp, ffn_*_exps) */
    DENSE_FUSED = 16,     /* attn_qkv (or attn_q/k/v) and ffn_up holding gate|up */
    DENSE_LONGROPE = 32,  /* rope_factors_* tensors, rope.scaling.attn_factor */
    DENSE_ATTN_TEMP = 64, /* position-dependent query temperature (attention.temperature_scale) */
    DENSE_MROPE = 128,    /* M-RoPE over rope.dimension_sections (kiln_batch_inputs.mpos), sections in order */
    DENSE_IMROPE = 256,   /* the same with the sections interleaved (Qwen3-VL) */
};

static const model_arch k_archs[] = {
    {"llama", &model_family_dense, 0, 0}, /* Llama 2/3, Mistral, TinyLlama */
    {"qwen2", &model_family_dense, 0, DENSE_NEOX | DENSE_QKV_BIAS},
    {"qwen3", &model_family_dense, 0, DENSE_NEOX | DENSE_QK_NORM},
    {"qwen3moe", &model_family_dense, 0, DENSE_NEOX | DENSE_QK_NORM | DENSE_MOE}, /* Qwen3-30B-A3B, Qwen3-Coder */
    {"phi3", &model_family_dense, 0, DENSE_NEOX | DENSE_FUSED | DENSE_LONGROPE},  /* Phi-3, Phi-3.5, Phi-4-mini */
    {"mistral3", &model_family_dense, 0, DENSE_ATTN_TEMP}, /* Mistral Small 3.x, Ministral 3 (text) */
    {"qwen2vl", &model_family_dense, 0, DENSE_NEOX | DENSE_QKV_BIAS | DENSE_MROPE}, /* Qwen2-VL, Qwen2.5-VL */
    {"qwen3vl", &model_family_dense, 0, DENSE_NEOX | DENSE_QK_NORM | DENSE_IMROPE}, /* Qwen3-VL */
    {"qwen3vlmoe", &model_family_dense, 0,
     DENSE_NEOX | DENSE_QK_NORM | DENSE_MOE | DENSE_IMROPE}, /* Qwen3-VL-30B-A3B */
};

typedef struct dense_layer {
    const float *attn_norm;        /* [n_embd] */
    kern_mat wq, wk, wv, wo;       /* q: n_embd -> n_head*hd_k ... */
    const float *bq, *bk, *bv;     /* optional biases */
    const float *q_norm, *k_norm;  /* [hd_k] (qk_norm archs) */
    const float *ffn_norm;         /* [n_embd] */
    kern_mat w_gate, w_up, w_down; /* n_embd -> n_ff -> n_embd */
    model_moe_layer ex;            /* DENSE_MOE */
} dense_layer;

typedef struct dense_model {
    dense_layer *layers;
    model_moe_hp moe;      /* n_expert 0: dense FFNs */
    kern_mat *experts;     /* [n_layer][3][n_expert] views of the expert tensors */
    float attn_temp;       /* query temperature scale; 0: none */
    float attn_temp_floor; /* positions per temperature step (n_ctx_orig) */
} dense_model;

/* ---------------------------------------------------------------- binding */

/* Rows r0 .. r0+n-1 of w, as a matrix of its own. */
static kern_mat dense_rows(kern_mat w, int64_t r0, int64_t n) {
    if (w.data) w.data = (const uint8_t *)w.data + (size_t)r0 * quant_row_size(w.type, w.ncols);
    w.nrows = n;
    return w;
}

static kiln_status dense_bind(kiln_model *m) {
    model_hparams *hp = &m->hp;
    const int moe = (m->arch->flags & DENSE_MOE) != 0;
    if (!moe && hp->n_ff <= 0) {
        return base_fail(KILN_ERR_FORMAT, "bad or missing feed_forward_length (%d)", hp->n_ff);
    }
    hp->rope.neox = (m->arch->flags & DENSE_NEOX) != 0;
    if (m->arch->flags & (DENSE_MROPE | DENSE_IMROPE)) {
        const kiln_status st = model_rope_sections(m, (m->arch->flags & DENSE_IMROPE) ? KERN_IMROPE : KERN_MROPE);
        if (st) return st;
    }
    /* Qwen3-VL: an image row carries n_deepstack more slices of n_embd,
     * added to the residual after layers 0 .. n_deepstack - 1 */
    const int64_t n_ds = model_meta_int(m, "n_deepstack_layers", 0);
    if (n_ds < 0 || n_ds > hp->n_layer) {
        return base_fail(KILN_ERR_FORMAT, "bad n_deepstack_layers %lld", (long long)n_ds);
    }
    hp->n_embd_inp = hp->n_embd * (int)(1 + n_ds);
    dense_model *d = calloc(1, sizeof *d);
    m->fam = d;
    if (!d) { return base_fail(KILN_ERR_NOMEM, "out of memory"); }
    if (moe) {
        kiln_status st = model_moe_read_hparams(m, &d->moe);
        if (st) return st;
        if (!d->moe.n_expert) { return base_fail(KILN_ERR_FORMAT, "%s without expert_count", m->arch_name); }
        d->moe.F_sh = 0;    /* no shared expert */
        d->moe.w_scale = 0; /* the renormalized weights as they are */
        d->experts = calloc((size_t)hp->n_layer * 3 * (size_t)d->moe.n_expert, sizeof *d->experts);
    }
    d->layers = calloc((size_t)hp->n_layer, sizeof *d->layers);
    if (!d->layers || (moe && !d->experts)) { return base_fail(KILN_ERR_NOMEM, "out of memory"); }
    if (m->arch->flags & DENSE_ATTN_TEMP) {
        d->attn_temp = (float)model_meta_float(m, "attention.temperature_scale", 0.0);
        d->attn_temp_floor = (float)hp->rope.n_ctx_orig;
        if (d->attn_temp != 0.0f && !(d->attn_temp_floor > 0.0f)) {
            return base_fail(KILN_ERR_FORMAT,
                             "attention.temperature_scale without rope.scaling.original_context_length");
        }
    }
    model_binder B = {m, KILN_OK};
    const int64_t E = hp->n_embd;
    m->tok_embd = model_bind_mat(&B, "token_embd.weight", E, -1, 0);
    hp->n_vocab = (int)m->tok_embd.nrows;
    m->out_norm = model_bind_vec(&B, "output_norm.weight", E, 0);
    m->output = model_bind_mat(&B, "output.weight", E, hp->n_vocab, 1);
    if (!m->output.data) m->output = m->tok_embd; /* tied embeddings */
    const int64_t nq = (int64_t)hp->n_head * hp->hd_k, nkv = (int64_t)hp->n_head_kv * hp->hd_k;
    const int bias_opt = !(m->arch->flags & DENSE_QKV_BIAS), fused = (m->arch->flags & DENSE_FUSED) != 0;
    if (m->arch->flags & DENSE_LONGROPE) {
        const int64_t nf = hp->rope.n_rot / 2;
        hp->rope.freq_factors = model_bind_vec(&B, "rope_factors_short.weight", nf, 1);
        hp->rope_factors_long = model_bind_vec(&B, "rope_factors_long.weight", nf, 1);
        if (!hp->rope.freq_factors) hp->rope.freq_factors = hp->rope_factors_long;
        hp->rope.attn_factor = (float)model_meta_float(m, "rope.scaling.attn_factor", 1.0);
        if (!(hp->rope.attn_factor > 0.0f) || !isfinite(hp->rope.attn_factor))
            model_bind_fail(&B, "bad rope.scaling.attn_factor");
    }
    for (int i = 0; i < hp->n_layer && !B.st; i++) {
        dense_layer *l = &d->layers[i];
        char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", i, s), n)
        l->attn_norm = model_bind_vec(&B, NAME("attn_norm.weight"), E, 0);
        const kern_mat qkv = fused ? model_bind_mat(&B, NAME("attn_qkv.weight"), E, nq + 2 * nkv, 1) : (kern_mat){0};
        if (qkv.data) {
            l->wq = dense_rows(qkv, 0, nq);
            l->wk = dense_rows(qkv, nq, nkv);
            l->wv = dense_rows(qkv, nq + nkv, nkv);
        } else {
            l->wq = model_bind_mat(&B, NAME("attn_q.weight"), E, nq, 0);
            l->wk = model_bind_mat(&B, NAME("attn_k.weight"), E, nkv, 0);
            l->wv = model_bind_mat(&B, NAME("attn_v.weight"), E, nkv, 0);
        }
        l->wo = model_bind_mat(&B, NAME("attn_output.weight"), nq, E, 0);
        l->bq = model_bind_vec(&B, NAME("attn_q.bias"), nq, bias_opt);
        l->bk = model_bind_vec(&B, NAME("attn_k.bias"), nkv, bias_opt);
        l->bv = model_bind_vec(&B, NAME("attn_v.bias"), nkv, bias_opt);
        if (m->arch->flags & DENSE_QK_NORM) {
            l->q_norm = model_bind_vec(&B, NAME("attn_q_norm.weight"), hp->hd_k, 0);
            l->k_norm = model_bind_vec(&B, NAME("attn_k_norm.weight"), hp->hd_k, 0);
        }
        l->ffn_norm = model_bind_vec(&B, NAME("ffn_norm.weight"), E, 0);
        if (moe) {
            model_moe_bind(&B, m, &d->moe, i, &l->ex, d->experts + (size_t)i * 3 * d->moe.n_expert);
            continue;
        }
        if (fused) {
            const kern_mat gu = model_bind_mat(&B, NAME("ffn_up.weight"), E, 2 * (int64_t)hp->n_ff, 0);
            l->w_gate = dense_rows(gu, 0, hp->n_ff);
            l->w_up = dense_rows(gu, hp->n_ff, hp->n_ff);
        } else {
            l->w_gate = model_bind_mat(&B, NAME("ffn_gate.weight"), E, hp->n_ff, 0);
            l->w_up = model_bind_mat(&B, NAME("ffn_up.weight"), E, hp->n_ff, 0);
        }
        l->w_down = model_bind_mat(&B, NAME("ffn_down.weight"), hp->n_ff, E, 0);
#undef NAME
    }
    if (B.st) return B.st;
    /* a decode step reads one token's experts, not all of them */
    if (moe) m->active_bytes = model_moe_active_bytes(m, &d->moe, hp->n_layer);
    return 0;
}

static void dense_free(kiln_model *m) {
    dense_model *d = m->fam;
    if (!d) return;
    free(d->layers);
    free(d->experts);
    free(d);
}

static void dense_weights(kiln_model *m, model_weights *w) {
    const model_hparams *hp = &m->hp;
    dense_model *d = m->fam;
    const int64_t nq = (int64_t)hp->n_head * hp->hd_k, nkv = (int64_t)hp->n_head_kv * hp->hd_k;
    model_weights_mat(w, &m->output);
    model_weights_vec(w, &m->out_norm, hp->n_embd);
    model_weights_vec(w, &m->hp.rope.freq_factors, hp->rope.n_rot / 2);
    model_weights_vec(w, &m->hp.rope_factors_long, hp->rope.n_rot / 2);
    for (int i = 0; i < hp->n_layer; i++) {
        dense_layer *l = &d->layers[i];
        model_weights_layer(w, i);
        kern_mat *ms[] = {&l->wq, &l->wk, &l->wv, &l->wo, &l->w_gate, &l->w_up, &l->w_down};
        for (size_t k = 0; k < sizeof ms / sizeof ms[0]; k++) model_weights_mat(w, ms[k]);
        if (d->moe.n_expert) model_moe_weights(m, &d->moe, &l->ex, w);
        const float **v[] = {&l->attn_norm, &l->ffn_norm, &l->bq, &l->bk, &l->bv, &l->q_norm, &l->k_norm};
        const int64_t vl[] = {hp->n_embd, hp->n_embd, nq, nkv, nkv, hp->hd_k, hp->hd_k};
        for (size_t k = 0; k < sizeof v / sizeof v[0]; k++)
            if (*v[k]) model_weights_vec(w, v[k], vl[k]);
    }
}

static void dense_seq_shape(const kiln_model *m, model_seq_shape *s) {
    memset(s, 0, sizeof *s);
    s->n_attn_layer = m->hp.n_layer;
    s->n_head_kv = m->hp.n_head_kv;
    s->hd = m->hp.hd_k;
}

/* ------------------------------------------------------------ activations */

typedef struct dense_ws {
    float *x, *xn, *q, *k, *v, *att, *gate, *up, *y;
    int32_t *ids;    /* [n_batch] the batch's ids, image tokens as 0 (their rows come from c->b_embd) */
    model_moe_ws ex; /* DENSE_MOE */
} dense_ws;

static void dense_ctx_free(kiln_context *c) {
    dense_ws *w = c->ws;
    if (w) {
        float *bufs[] = {w->x, w->xn, w->q, w->k, w->v, w->att, w->gate, w->up, w->y};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            if (bufs[i]) c->bx.ops->free(&c->bx, bufs[i]);
        model_moe_ws_free(c, &w->ex);
        free(w->ids);
        free(w);
    }
    c->ws = NULL;
}

static int dense_ctx_init(kiln_context *c) {
    const model_hparams *hp = &c->m->hp;
    const dense_model *d = c->m->fam;
    backend_ctx *X = &c->bx;
    dense_ws *w = calloc(1, sizeof *w);
    c->ws = w;
    if (!w) return -1;
    const size_t moe = d->moe.n_expert ? 1 : 0;
    const size_t B = (size_t)c->p.n_batch, E = (size_t)hp->n_embd, F = moe ? 0 : (size_t)hp->n_ff;
    const size_t nq = (size_t)hp->n_head * hp->hd_k, nkv = (size_t)hp->n_head_kv * hp->hd_k;
    struct {
        float **p;
        size_t n;
    } bufs[] = {
        {&w->x, B * E},    {&w->xn, B * E},   {&w->q, B * nq}, {&w->k, B * nkv},     {&w->v, B * nkv},
        {&w->att, B * nq}, {&w->gate, B * F}, {&w->up, B * F}, {&w->y, moe * B * E},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (!(*bufs[i].p = X->ops->alloc(X, bufs[i].n * sizeof(float)))) return -1;
    if (!(w->ids = malloc(B * sizeof *w->ids))) return -1;
    if (moe && model_moe_ws_init(c, &w->ex, &d->moe, hp->n_embd, c->p.n_batch)) return -1;
    size_t maxk = E > nq ? E : nq;
    if (F > maxk) maxk = F;
    if (moe && (size_t)model_moe_mm_cols(&d->moe) > maxk) maxk = (size_t)model_moe_mm_cols(&d->moe);
    const int rows = moe ? model_moe_mm_rows(&d->moe, c->p.n_batch) : c->p.n_batch;
    return X->ops->reserve(X, (int64_t)maxk, rows);
}

/* ---------------------------------------------------------------- forward */

/* Qwen3-VL: after layer l, each image token's residual takes slice l + 1
 * of its row (host memory; text tokens have none). */
static void dense_deepstack(kiln_context *c, const kiln_batch *b, float *x, int l) {
    const int E = c->m->hp.n_embd, Ei = c->m->hp.n_embd_inp;
    for (int i = 0; i < b->n; i++) {
        if (b->token[i] >= 0) continue;
        const float *ds = c->b_embd + (size_t)i * Ei + (size_t)(l + 1) * E;
        float *xi = x + (size_t)i * E;
        for (int e = 0; e < E; e++) xi[e] += ds[e];
    }
}

/* Every op runs on the context's backend (backend/backend.h), over the
 * batch's n tokens at once. */
static kiln_status dense_forward(kiln_context *c, const kiln_batch *b, int n_out) {
    const kiln_model *m = c->m;
    const model_hparams *hp = &m->hp;
    const dense_model *d = m->fam;
    const int n = b->n, E = hp->n_embd, hd = hp->hd_k;
    const int64_t nq = (int64_t)hp->n_head * hd, nkv = (int64_t)hp->n_head_kv * hd;

    model_attn_prepare(c, n);
    if (c->b_embd && !m->be->host_mem)
        return model_fail(c, KILN_ERR_UNSUPPORTED, "image rows on the %s backend", m->be->name);
    /* a split model: the embeddings and the first layers on the host part */
    const int l0 = model_split_enter(c);
    dense_ws *w = c->ws;
    backend_ctx *X = &c->bx;
    const backend_ops *o = X->ops;
    const int Ei = hp->n_embd_inp;
    const int32_t *ids = b->token;
    if (c->b_embd) { /* image tokens: their rows as given (no scale), the first n_embd of n_embd_inp */
        for (int i = 0; i < n; i++) w->ids[i] = b->token[i] < 0 ? 0 : b->token[i];
        ids = w->ids;
    }
    o->get_rows(X, &m->tok_embd, ids, n, w->x);
    for (int i = 0; c->b_embd && i < n; i++)
        if (b->token[i] < 0) memcpy(w->x + (size_t)i * E, c->b_embd + (size_t)i * Ei, (size_t)E * sizeof(float));

    for (int l = 0; l < hp->n_layer; l++) {
        const dense_layer *L = &d->layers[l];
        if (l == l0) { /* the residual rows up to the GPU's part */
            const float *xh = w->x;
            model_split_swap(c);
            X = &c->bx;
            o = X->ops;
            w = c->ws;
            o->upload(X, w->x, xh, (size_t)n * E * sizeof(float));
        }
        o->rmsnorm(X, w->xn, w->x, L->attn_norm, n, E, hp->eps);
        kern_mm_out qkv[3] = {{&L->wq, w->q, nq}, {&L->wk, w->k, nkv}, {&L->wv, w->v, nkv}};
        o->matmul_multi(X, qkv, 3, w->xn, n);
        const backend_qk qk = {
            .q = w->q,
            .k = w->k,
            .v = w->v,
            .bq = L->bq,
            .bk = L->bk,
            .bv = L->bv,
            .q_norm = L->q_norm,
            .k_norm = L->k_norm,
            .n_head = hp->n_head,
            .n_head_kv = hp->n_head_kv,
            .hd = hd,
            .eps = hp->eps,
            .rope = &hp->rope,
            .temp = d->attn_temp,
            .temp_floor = d->attn_temp_floor,
            .layer = l - c->attn_base,
        };
        o->qk_store(X, &qk, n);
        o->attn(X, l - c->attn_base, w->q, w->att, n, NULL);
        o->matmul(X, &L->wo, w->att, n, w->xn, E);
        o->add_rmsnorm(X, w->x, w->xn, w->xn, L->ffn_norm, n, E, hp->eps); /* x += attention, xn = its norm */
        if (d->moe.n_expert) {
            model_moe_ffn(c, &d->moe, &L->ex, &w->ex, w->xn, w->y, n);
            o->add(X, w->x, w->y, n, E);
            if (c->b_embd && Ei > E && (l + 1) * E < Ei) dense_deepstack(c, b, w->x, l);
            continue;
        }
        kern_mm_out gu[2] = {{&L->w_gate, w->gate, hp->n_ff}, {&L->w_up, w->up, hp->n_ff}};
        o->matmul_multi(X, gu, 2, w->xn, n);
        o->swiglu(X, w->gate, w->up, n, hp->n_ff);
        o->matmul(X, &L->w_down, w->gate, n, w->xn, E);
        o->add(X, w->x, w->xn, n, E);
        if (c->b_embd && Ei > E && (l + 1) * E < Ei) dense_deepstack(c, b, w->x, l);
    }

    if (l0 >= 0) { /* and back down for the head */
        const float *xd = w->x;
        model_split_swap(c);
        w = c->ws;
        c->bx_lo.ops->download(&c->bx_lo, w->x, xd, (size_t)n * E * sizeof(float));
    }
    model_batch_commit(c, n);
    model_batch_output(c, w->x, n, n_out);
    if (l0 >= 0) model_split_swap(c);
    return KILN_OK;
}

const model_family model_family_dense = {
    .name = "dense",
    .archs = k_archs,
    .n_archs = sizeof k_archs / sizeof k_archs[0],
    .image_input = 1,
    .bind = dense_bind,
    .free = dense_free,
    .weights = dense_weights,
    .seq_shape = dense_seq_shape,
    .ctx_init = dense_ctx_init,
    .ctx_free = dense_ctx_free,
    .forward = dense_forward,
};
