/*
 * The gpt-oss family (OpenAI's open-weight mixture-of-experts models).
 * Every layer is
 *
 *   x += Wo attn(rope(Wq xn + bq), rope(Wk xn + bk), Wv xn + bv) + bo,   xn = rms(x) * attn_norm
 *   x += moe(xn),                                                         xn = rms(x) * post_attention_norm
 *
 * with NeoX RoPE over the whole head (YaRN from the file's rope scaling, the
 * same on every layer) and attention scale 1/sqrt(hd).  Each head's softmax
 * has one more logit, the layer's learned sink (attn_sinks [n_head]), that
 * adds no value (model_attn_opts).  Layers il with il % period < period - 1
 * (attention.sliding_window_pattern, default 2: the even layers) see only
 * the last attention.sliding_window positions.  The FFN is
 * model/moe.h's with gpt-oss's variants: router and expert biases, the
 * softmax over the top expert_used_count logits only, and the clamped
 * SwiGLU kern_swiglu_oai (alpha 1.702, limit 7).
 * Shapes of the activations (per token row):
 *   x, xn  [n_embd]          residual stream and its normalized copy
 *   q, att [n_head * hd]     queries, attention output
 *   k, v   [n_head_kv * hd]  this batch's keys/values before caching
 *   y      [n_embd]          the FFN's output
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

static const model_arch k_archs[] = {
    {"gpt-oss", &model_family_gptoss, 0, 0}, /* gpt-oss-20b, gpt-oss-120b */
};

typedef struct gptoss_layer {
    const float *attn_norm;    /* [n_embd] */
    kern_mat wq, wk, wv, wo;   /* q: n_embd -> n_head*hd, k/v: n_embd -> n_head_kv*hd, o: n_head*hd -> n_embd */
    const float *bq, *bk, *bv; /* [n_head*hd], [n_head_kv*hd] x2 */
    const float *bo;           /* [n_embd] */
    const float *ffn_norm;     /* [n_embd]: post_attention_norm, in front of the MoE */
    model_moe_layer ex;
} gptoss_layer;

typedef struct gptoss_model {
    gptoss_layer *layers;
    const float **sinks; /* [n_layer] of [n_head] */
    uint8_t *swa;        /* [n_layer] 1: a sliding-window layer */
    int n_swa;           /* the window in positions, 0: none */
    model_moe_hp moe;
    kern_mat *experts; /* [n_layer][3][n_expert] views of the expert tensors */
} gptoss_model;

/* ---------------------------------------------------------------- binding */

static kiln_status gptoss_bind(kiln_model *m) {
    model_hparams *hp = &m->hp;
    gptoss_model *d = calloc(1, sizeof *d);
    m->fam = d;
    if (!d) { return base_fail(KILN_ERR_NOMEM, "out of memory"); }
    /* the head is rope.dimension_count wide, all of it rotated */
    if (hp->rope.n_rot != hp->hd_k) {
        return base_fail(KILN_ERR_FORMAT, "rope.dimension_count %d differs from the head size %d", hp->rope.n_rot,
                         hp->hd_k);
    }
    hp->rope.neox = 1;
    kiln_status st = model_moe_read_hparams(m, &d->moe);
    if (st) return st;
    if (!d->moe.n_expert) { return base_fail(KILN_ERR_FORMAT, "%s without expert_count", m->arch_name); }
    d->moe.F_sh = 0; /* no shared expert */
    d->moe.gating = MODEL_MOE_TOPK_SOFTMAX;
    d->moe.act = MODEL_MOE_SWIGLU_OAI;
    const int64_t n_swa = model_meta_int(m, "attention.sliding_window", 0);
    const int64_t period = model_meta_int(m, "attention.sliding_window_pattern", 2);
    if (n_swa < 0 || n_swa > (1 << 30) || period < 0 || period > 1024) {
        return base_fail(KILN_ERR_FORMAT, "bad attention.sliding_window %lld / sliding_window_pattern %lld",
                         (long long)n_swa, (long long)period);
    }
    d->n_swa = (int)n_swa;
    d->layers = calloc((size_t)hp->n_layer, sizeof *d->layers);
    d->sinks = calloc((size_t)hp->n_layer, sizeof *d->sinks);
    d->swa = calloc((size_t)hp->n_layer, 1);
    d->experts = calloc((size_t)hp->n_layer * 3 * (size_t)d->moe.n_expert, sizeof *d->experts);
    if (!d->layers || !d->sinks || !d->swa || !d->experts) { return base_fail(KILN_ERR_NOMEM, "out of memory"); }
    for (int i = 0; i < hp->n_layer; i++) d->swa[i] = n_swa > 0 && (period == 0 || i % period < period - 1);
    model_binder B = {m, KILN_OK};
    const int64_t E = hp->n_embd;
    m->tok_embd = model_bind_mat(&B, "token_embd.weight", E, -1, 0);
    hp->n_vocab = (int)m->tok_embd.nrows;
    m->out_norm = model_bind_vec(&B, "output_norm.weight", E, 0);
    m->output = model_bind_mat(&B, "output.weight", E, hp->n_vocab, 0);
    const int64_t nq = (int64_t)hp->n_head * hp->hd_k, nkv = (int64_t)hp->n_head_kv * hp->hd_k;
    for (int i = 0; i < hp->n_layer && !B.st; i++) {
        gptoss_layer *l = &d->layers[i];
        char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", i, s), n)
        l->attn_norm = model_bind_vec(&B, NAME("attn_norm.weight"), E, 0);
        l->wq = model_bind_mat(&B, NAME("attn_q.weight"), E, nq, 0);
        l->wk = model_bind_mat(&B, NAME("attn_k.weight"), E, nkv, 0);
        l->wv = model_bind_mat(&B, NAME("attn_v.weight"), E, nkv, 0);
        l->wo = model_bind_mat(&B, NAME("attn_output.weight"), nq, E, 0);
        l->bq = model_bind_vec(&B, NAME("attn_q.bias"), nq, 0);
        l->bk = model_bind_vec(&B, NAME("attn_k.bias"), nkv, 0);
        l->bv = model_bind_vec(&B, NAME("attn_v.bias"), nkv, 0);
        l->bo = model_bind_vec(&B, NAME("attn_output.bias"), E, 0);
        d->sinks[i] = model_bind_vec(&B, NAME("attn_sinks.weight"), hp->n_head, 0);
        l->ffn_norm = model_bind_vec(&B, NAME("post_attention_norm.weight"), E, 0);
        model_moe_bind(&B, m, &d->moe, i, &l->ex, d->experts + (size_t)i * 3 * d->moe.n_expert);
        if (!B.st && (!l->ex.router_b || !l->ex.b_gate || !l->ex.b_up || !l->ex.b_down))
            model_bind_fail(&B, "layer %d: the router and every expert product need a bias", i);
#undef NAME
    }
    if (B.st) return B.st;
    /* a decode step reads one token's experts, not all of them */
    m->active_bytes = model_moe_active_bytes(m, &d->moe, hp->n_layer);
    return 0;
}

static void gptoss_free(kiln_model *m) {
    gptoss_model *d = m->fam;
    if (!d) return;
    free(d->layers);
    free(d->sinks);
    free(d->swa);
    free(d->experts);
    free(d);
}

static void gptoss_weights(kiln_model *m, model_weights *w) {
    const model_hparams *hp = &m->hp;
    gptoss_model *d = m->fam;
    const int64_t nq = (int64_t)hp->n_head * hp->hd_k, nkv = (int64_t)hp->n_head_kv * hp->hd_k;
    model_weights_mat(w, &m->output);
    model_weights_vec(w, &m->out_norm, hp->n_embd);
    for (int i = 0; i < hp->n_layer; i++) {
        gptoss_layer *l = &d->layers[i];
        kern_mat *ms[] = {&l->wq, &l->wk, &l->wv, &l->wo};
        for (size_t k = 0; k < sizeof ms / sizeof ms[0]; k++) model_weights_mat(w, ms[k]);
        model_moe_weights(m, &d->moe, &l->ex, w);
        const float **v[] = {&l->attn_norm, &l->ffn_norm, &l->bq, &l->bk, &l->bv, &l->bo, &d->sinks[i]};
        const int64_t vl[] = {hp->n_embd, hp->n_embd, nq, nkv, nkv, hp->n_embd, hp->n_head};
        for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) model_weights_vec(w, v[k], vl[k]);
    }
}

static void gptoss_seq_shape(const kiln_model *m, model_seq_shape *s) {
    memset(s, 0, sizeof *s);
    s->n_attn_layer = m->hp.n_layer;
    s->n_head_kv = m->hp.n_head_kv;
    s->hd = m->hp.hd_k;
}

/* ------------------------------------------------------------ activations */

typedef struct gptoss_ws {
    float *x, *xn, *q, *k, *v, *att, *y;
    model_moe_ws ex;
} gptoss_ws;

static void gptoss_ctx_free(kiln_context *c) {
    gptoss_ws *w = c->ws;
    if (w) {
        float *bufs[] = {w->x, w->xn, w->q, w->k, w->v, w->att, w->y};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            if (bufs[i]) c->bx.ops->free(&c->bx, bufs[i]);
        model_moe_ws_free(c, &w->ex);
        free(w);
    }
    c->ws = NULL;
}

static int gptoss_ctx_init(kiln_context *c) {
    const model_hparams *hp = &c->m->hp;
    const gptoss_model *d = c->m->fam;
    backend_ctx *X = &c->bx;
    gptoss_ws *w = calloc(1, sizeof *w);
    c->ws = w;
    if (!w) return -1;
    const size_t B = (size_t)c->p.n_batch, E = (size_t)hp->n_embd;
    const size_t nq = (size_t)hp->n_head * hp->hd_k, nkv = (size_t)hp->n_head_kv * hp->hd_k;
    struct {
        float **p;
        size_t n;
    } bufs[] = {
        {&w->x, B * E},   {&w->xn, B * E},   {&w->q, B * nq}, {&w->k, B * nkv},
        {&w->v, B * nkv}, {&w->att, B * nq}, {&w->y, B * E},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (!(*bufs[i].p = X->ops->alloc(X, bufs[i].n * sizeof(float)))) return -1;
    if (model_moe_ws_init(c, &w->ex, &d->moe, hp->n_embd, c->p.n_batch)) return -1;
    size_t maxk = E > nq ? E : nq;
    if ((size_t)model_moe_mm_cols(&d->moe) > maxk) maxk = (size_t)model_moe_mm_cols(&d->moe);
    return X->ops->reserve(X, (int64_t)maxk, model_moe_mm_rows(&d->moe, c->p.n_batch));
}

/* ---------------------------------------------------------------- forward */

/* Every op runs on the context's backend (backend/backend.h), over the
 * batch's n tokens at once. */
static kiln_status gptoss_forward(kiln_context *c, const kiln_batch *b, int n_out) {
    const kiln_model *m = c->m;
    const model_hparams *hp = &m->hp;
    const gptoss_model *d = m->fam;
    gptoss_ws *w = c->ws;
    backend_ctx *X = &c->bx;
    const backend_ops *o = X->ops;
    const int n = b->n, E = hp->n_embd, hd = hp->hd_k;
    const int64_t nq = (int64_t)hp->n_head * hd, nkv = (int64_t)hp->n_head_kv * hd;

    model_attn_prepare(c, n);
    o->get_rows(X, &m->tok_embd, b->token, n, w->x);

    for (int l = 0; l < hp->n_layer; l++) {
        const gptoss_layer *L = &d->layers[l];
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
            .n_head = hp->n_head,
            .n_head_kv = hp->n_head_kv,
            .hd = hd,
            .eps = hp->eps,
            .rope = &hp->rope,
            .layer = l,
        };
        o->qk_store(X, &qk, n);
        const backend_attn_opts ao = {.window = d->swa[l] ? d->n_swa : 0, .sinks = d->sinks[l]};
        o->attn(X, l, w->q, w->att, n, &ao);
        o->matmul(X, &L->wo, w->att, n, w->xn, E);
        for (int i = 0; i < n; i++) o->add(X, w->xn + (size_t)i * E, L->bo, 1, E); /* + bo, token by token */
        o->add_rmsnorm(X, w->x, w->xn, w->xn, L->ffn_norm, n, E, hp->eps);         /* x += attention, xn = its norm */
        model_moe_ffn(c, &d->moe, &L->ex, &w->ex, w->xn, w->y, n);
        o->add(X, w->x, w->y, n, E);
    }

    model_batch_commit(c, n);
    model_batch_output(c, w->x, n, n_out);
    return KILN_OK;
}

const model_family model_family_gptoss = {
    .name = "gptoss",
    .archs = k_archs,
    .n_archs = sizeof k_archs / sizeof k_archs[0],
    .bind = gptoss_bind,
    .free = gptoss_free,
    .weights = gptoss_weights,
    .seq_shape = gptoss_seq_shape,
    .ctx_init = gptoss_ctx_init,
    .ctx_free = gptoss_ctx_free,
    .forward = gptoss_forward,
};
