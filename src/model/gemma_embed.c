/*
 * The EmbeddingGemma family (general.architecture "gemma-embedding"): a
 * Gemma 3 stack run bidirectionally, mean-pooled, then the sentence-
 * transformers dense projections the file carries.  Per token row:
 *
 *   x = tok[id] * sqrt(n_embd)
 *   per layer l:
 *     h = rms(x) * attn_norm
 *     q = rms_head(Wq h) * q_norm,  k = rms_head(Wk h) * k_norm,  v = Wv h
 *     x += rms(Wo attn(rope(q) / sqrt(hd), rope(k), v)) * post_attention_norm
 *     h = rms(x) * ffn_norm
 *     x += rms(down(gelu_tanh(gate h) * up h)) * post_ffw_norm
 *   x = rms(x) * output_norm
 *   vector = dense_3(dense_2(mean over the tokens))   (no bias, no activation;
 *            the pooling is {arch}.pooling_type, mean in the published files)
 *
 * The norm weights are used as stored (the converter already added
 * Gemma's 1).  The head size is attention.key_length, independent of
 * n_embd.  Layer l is global when l % sliding_window_pattern ==
 * pattern - 1 (S S S S S G for the default 6); a local layer sees
 * |t - u| <= sliding_window / 2 and rotates with rope.freq_base_swa
 * (10000 when absent), a global one with rope.freq_base.  NeoX RoPE.
 */
#include "model/encoder.h"
#include "model/gemma.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ge_layer {
    const float *attn_norm, *q_norm, *k_norm, *post_attn_norm, *ffn_norm, *post_ffn_norm;
    kern_mat wq, wk, wv, wo;
    kern_mat w_gate, w_up, w_down;
    int local;
} ge_layer;

typedef struct ge_model {
    ge_layer *layers;
    int window;
    kern_rope rope_local;
    kern_mat dense2, dense3; /* n_embd -> d2, d2 -> n_embd; data NULL when absent */
    int d2;
} ge_model;

static void ge_free(kiln_model *m) {
    ge_model *d = m->fam;
    if (!d) return;
    free(d->layers);
    free(d);
}

static kiln_status ge_pattern(kiln_model *m, ge_model *d) {
    const int n = m->hp.n_layer;
    uint8_t *local = calloc((size_t)n, 1);
    if (!local) { return base_fail(KILN_ERR_NOMEM, "out of memory"); }
    const kiln_status rc = model_gemma_swa_layers(m, local, 6);
    for (int l = 0; l < n && !rc; l++) d->layers[l].local = local[l];
    free(local);
    return rc;
}

static kiln_status ge_bind(kiln_model *m) {
    model_hparams *hp = &m->hp;
    if (hp->n_ff <= 0) { return base_fail(KILN_ERR_FORMAT, "bad or missing feed_forward_length (%d)", hp->n_ff); }
    ge_model *d = calloc(1, sizeof *d);
    if (d) d->layers = calloc((size_t)hp->n_layer, sizeof *d->layers);
    m->fam = d;
    if (!d || !d->layers) { return base_fail(KILN_ERR_NOMEM, "out of memory"); }
    const int64_t n_swa = model_meta_int(m, "attention.sliding_window", -1);
    if (n_swa <= 0 || n_swa > (1 << 24)) {
        return base_fail(KILN_ERR_FORMAT, "gemma-embedding: missing or bad attention.sliding_window (%lld)",
                         (long long)n_swa);
    }
    d->window = (int)(n_swa / 2);
    kiln_status st = ge_pattern(m, d);
    if (st) return st;
    hp->rope.neox = 1;
    st = model_gemma_rope_local(m, hp->rope.n_rot, &d->rope_local);
    if (st) return st;

    model_binder B = {m, KILN_OK};
    const int64_t E = hp->n_embd, F = hp->n_ff, hd = hp->hd_k;
    const int64_t nq = (int64_t)hp->n_head * hd, nkv = (int64_t)hp->n_head_kv * hd;
    m->tok_embd = model_bind_mat(&B, "token_embd.weight", E, -1, 0);
    hp->n_vocab = (int)m->tok_embd.nrows;
    m->out_norm = model_bind_vec(&B, "output_norm.weight", E, 0);
    for (int i = 0; i < hp->n_layer && !B.st; i++) {
        ge_layer *l = &d->layers[i];
        char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", i, s), n)
        l->attn_norm = model_bind_vec(&B, NAME("attn_norm.weight"), E, 0);
        l->wq = model_bind_mat(&B, NAME("attn_q.weight"), E, nq, 0);
        l->wk = model_bind_mat(&B, NAME("attn_k.weight"), E, nkv, 0);
        l->wv = model_bind_mat(&B, NAME("attn_v.weight"), E, nkv, 0);
        l->wo = model_bind_mat(&B, NAME("attn_output.weight"), nq, E, 0);
        l->q_norm = model_bind_vec(&B, NAME("attn_q_norm.weight"), hd, 0);
        l->k_norm = model_bind_vec(&B, NAME("attn_k_norm.weight"), hd, 0);
        l->post_attn_norm = model_bind_vec(&B, NAME("post_attention_norm.weight"), E, 0);
        l->ffn_norm = model_bind_vec(&B, NAME("ffn_norm.weight"), E, 0);
        l->w_gate = model_bind_mat(&B, NAME("ffn_gate.weight"), E, F, 0);
        l->w_up = model_bind_mat(&B, NAME("ffn_up.weight"), E, F, 0);
        l->w_down = model_bind_mat(&B, NAME("ffn_down.weight"), F, E, 0);
        l->post_ffn_norm = model_bind_vec(&B, NAME("post_ffw_norm.weight"), E, 0);
#undef NAME
    }
    d->dense2 = model_bind_mat(&B, "dense_2.weight", E, -1, 1);
    if (d->dense2.data) {
        d->d2 = (int)d->dense2.nrows;
        d->dense3 = model_bind_mat(&B, "dense_3.weight", d->d2, E, 0);
    } else if (gguf_find_tensor(m->gf, "dense_3.weight")) {
        model_bind_fail(&B, "dense_3.weight without dense_2.weight");
    }
    if (!B.st && d->dense2.data) {
        const int64_t fi = model_meta_int(m, "dense_2_feat_in", E), fo = model_meta_int(m, "dense_2_feat_out", d->d2);
        const int64_t gi = model_meta_int(m, "dense_3_feat_in", d->d2), go = model_meta_int(m, "dense_3_feat_out", E);
        if (fi != E || fo != d->d2 || gi != d->d2 || go != E)
            model_bind_fail(&B,
                            "dense_2/dense_3 features (%lld -> %lld, %lld -> %lld) disagree with the tensors "
                            "(%lld -> %d -> %lld)",
                            (long long)fi, (long long)fo, (long long)gi, (long long)go, (long long)E, d->d2,
                            (long long)E);
    }
    return B.st;
}

static void ge_weights(kiln_model *m, model_weights *w) {
    ge_model *d = m->fam;
    const int64_t E = m->hp.n_embd, hd = m->hp.hd_k;
    for (int i = 0; i < m->hp.n_layer; i++) {
        ge_layer *l = &d->layers[i];
        kern_mat *ms[] = {&l->wq, &l->wk, &l->wv, &l->wo, &l->w_gate, &l->w_up, &l->w_down};
        for (size_t k = 0; k < sizeof ms / sizeof ms[0]; k++) model_weights_mat(w, ms[k]);
        const float **v[] = {&l->attn_norm,      &l->q_norm,   &l->k_norm,
                             &l->post_attn_norm, &l->ffn_norm, &l->post_ffn_norm};
        const int64_t vl[] = {E, hd, hd, E, E, E};
        for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) model_weights_vec(w, v[k], vl[k]);
    }
    model_weights_vec(w, &m->out_norm, E);
}

/* ---------------------------------------------------------------- forward */

typedef struct ge_ws {
    thread_pool *pool;
    int cap_tok;
    float *x, *h;     /* [cap_tok][n_embd] */
    float *q, *att;   /* [cap_tok][n_head * hd] */
    float *k, *v;     /* [cap_tok][n_head_kv * hd] */
    float *gate, *up; /* [cap_tok][n_ff] */
    float *cs_global, *cs_local;
    float *scratch;
    int32_t *off, *seq;
    float *pooled, *proj; /* [cap_tok][n_embd], [cap_tok][d2] */
    void *mm_scratch;
} ge_ws;

static void ge_ws_free(void *ws) {
    ge_ws *w = ws;
    if (!w) return;
    void *bufs[] = {w->x,         w->h,        w->q,       w->att, w->k,   w->v,      w->gate, w->up,
                    w->cs_global, w->cs_local, w->scratch, w->off, w->seq, w->pooled, w->proj, w->mm_scratch};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(w);
}

static void *ge_ws_new(const kiln_model *m, int cap_tok, thread_pool *pool) {
    const ge_model *d = m->fam;
    const model_hparams *hp = &m->hp;
    const size_t N = (size_t)cap_tok, E = (size_t)hp->n_embd, F = (size_t)hp->n_ff, R = (size_t)hp->rope.n_rot;
    const size_t nq = (size_t)hp->n_head * hp->hd_k, nkv = (size_t)hp->n_head_kv * hp->hd_k;
    size_t widest = E > F ? E : F;
    if (nq > widest) widest = nq;
    if ((size_t)d->d2 > widest) widest = (size_t)d->d2;
    ge_ws *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->pool = pool;
    w->cap_tok = cap_tok;
    int ok = (w->x = malloc(N * E * 4)) && (w->h = malloc(N * E * 4)) && (w->q = malloc(N * nq * 4)) &&
             (w->att = malloc(N * nq * 4)) && (w->k = malloc(N * nkv * 4)) && (w->v = malloc(N * nkv * 4)) &&
             (w->gate = malloc(N * F * 4)) && (w->up = malloc(N * F * 4)) && (w->cs_global = malloc(N * R * 4)) &&
             (w->cs_local = malloc(N * R * 4)) && (w->scratch = malloc(model_enc_attn_scratch(pool, cap_tok) * 4)) &&
             (w->off = malloc((N + 1) * sizeof *w->off)) && (w->seq = malloc(N * sizeof *w->seq)) &&
             (w->pooled = malloc(N * E * 4)) && (w->proj = malloc(N * (size_t)(d->d2 ? d->d2 : 1) * 4)) &&
             (w->mm_scratch = malloc(kern_matmul_scratch_size((int64_t)widest, cap_tok)));
    if (!ok) {
        ge_ws_free(w);
        return NULL;
    }
    for (int t = 0; t < cap_tok; t++) {
        kern_rope_table(&hp->rope, t, w->cs_global + (size_t)t * R);
        kern_rope_table(&d->rope_local, t, w->cs_local + (size_t)t * R);
    }
    return w;
}

typedef struct ge_job {
    ge_ws *w;
    const kiln_model *m;
    const ge_layer *L;
    const model_enc_batch *b;
    const float *norm; /* rms_task: dst = rms(src) * norm */
    const float *src;
    float *dst;
    int add; /* rms_task: x += rms(src) * norm instead */
} ge_job;

static void rms_task(void *ud, int ith, int nth) {
    ge_job *j = ud;
    const int E = j->m->hp.n_embd;
    long lo, hi;
    thread_pool_range(j->b->n_rows, ith, nth, &lo, &hi);
    for (long r = lo; r < hi; r++) {
        const float *s = j->src + (size_t)r * E;
        if (j->add) {
            float *o = j->dst + (size_t)r * E;
            /* normalize in place in src (a sublayer output), then add */
            kern_rmsnorm((float *)s, s, j->norm, E, j->m->hp.eps);
            kern_add(o, s, E);
        } else {
            kern_rmsnorm(j->dst + (size_t)r * E, s, j->norm, E, j->m->hp.eps);
        }
    }
}

/* q, k: per-head RMS norm, then RoPE at the row's position. */
static void qk_task(void *ud, int ith, int nth) {
    ge_job *j = ud;
    const model_hparams *hp = &j->m->hp;
    const ge_model *d = j->m->fam;
    const int hd = hp->hd_k, R = hp->rope.n_rot;
    const kern_rope *rp = j->L->local ? &d->rope_local : &hp->rope;
    const float *tab = j->L->local ? j->w->cs_local : j->w->cs_global;
    const float scale = 1.0f / sqrtf((float)hd);
    long lo, hi;
    thread_pool_range(j->b->n_rows, ith, nth, &lo, &hi);
    for (long r = lo; r < hi; r++) {
        const int t = (int)r - j->b->off[j->b->seq[r]];
        float *q = j->w->q + (size_t)r * hp->n_head * hd, *k = j->w->k + (size_t)r * hp->n_head_kv * hd;
        for (int h = 0; h < hp->n_head; h++)
            kern_rmsnorm(q + (size_t)h * hd, q + (size_t)h * hd, j->L->q_norm, hd, hp->eps);
        for (int h = 0; h < hp->n_head_kv; h++)
            kern_rmsnorm(k + (size_t)h * hd, k + (size_t)h * hd, j->L->k_norm, hd, hp->eps);
        kern_rope_apply(rp, tab + (size_t)t * R, q, hp->n_head, hd);
        kern_rope_apply(rp, tab + (size_t)t * R, k, hp->n_head_kv, hd);
        for (int i = 0; i < hp->n_head * hd; i++) q[i] *= scale;
    }
}

static void geglu_task(void *ud, int ith, int nth) {
    ge_job *j = ud;
    const int F = j->m->hp.n_ff;
    long lo, hi;
    thread_pool_range(j->b->n_rows, ith, nth, &lo, &hi);
    for (long r = lo; r < hi; r++) {
        float *g = j->w->gate + (size_t)r * F;
        const float *u = j->w->up + (size_t)r * F;
        kern_gelu(g, F);
        for (int i = 0; i < F; i++) g[i] *= u[i];
    }
}

static void ge_encode(void *ws, const kiln_model *m, const int32_t *tokens, const uint8_t *types, const int32_t *len,
                      int n_seq, int pooling, float *out) {
    ge_ws *w = ws;
    const model_hparams *hp = &m->hp;
    const ge_model *d = m->fam;
    const int E = hp->n_embd, F = hp->n_ff, hd = hp->hd_k;
    const int nq = hp->n_head * hd, nkv = hp->n_head_kv * hd;
    model_enc_batch bt;
    model_enc_batch_init(&bt, len, n_seq, w->off, w->seq);
    const int N = bt.n_rows;
    ge_job j = {w, m, NULL, &bt, NULL, NULL, NULL, 0};

    const float scale = sqrtf((float)E);
    for (int r = 0; r < N; r++) {
        float *x = w->x + (size_t)r * E;
        kern_get_row(&m->tok_embd, tokens[r], x);
        for (int i = 0; i < E; i++) x[i] *= scale;
    }
    model_enc_attn at = {&bt, w->q,       w->k,          w->v, nq, nkv,  w->att,
                         nq,  hp->n_head, hp->n_head_kv, hd,   -1, 1.0f, w->scratch};
    for (int l = 0; l < hp->n_layer; l++) {
        const ge_layer *L = &d->layers[l];
        j.L = L;
        j.norm = L->attn_norm, j.src = w->x, j.dst = w->h, j.add = 0;
        thread_pool_run(w->pool, rms_task, &j);
        kern_mm_out qkv[3] = {{&L->wq, w->q, nq}, {&L->wk, w->k, nkv}, {&L->wv, w->v, nkv}};
        kern_matmul_multi(w->pool, qkv, 3, w->h, N, w->mm_scratch);
        thread_pool_run(w->pool, qk_task, &j);
        at.window = L->local ? d->window : -1;
        model_enc_attention(w->pool, &at);
        kern_matmul(w->pool, &L->wo, w->att, N, w->h, E, w->mm_scratch);
        j.norm = L->post_attn_norm, j.src = w->h, j.dst = w->x, j.add = 1;
        thread_pool_run(w->pool, rms_task, &j);

        j.norm = L->ffn_norm, j.src = w->x, j.dst = w->h, j.add = 0;
        thread_pool_run(w->pool, rms_task, &j);
        kern_mm_out gu[2] = {{&L->w_gate, w->gate, F}, {&L->w_up, w->up, F}};
        kern_matmul_multi(w->pool, gu, 2, w->h, N, w->mm_scratch);
        thread_pool_run(w->pool, geglu_task, &j);
        kern_matmul(w->pool, &L->w_down, w->gate, N, w->h, E, w->mm_scratch);
        j.norm = L->post_ffn_norm, j.src = w->h, j.dst = w->x, j.add = 1;
        thread_pool_run(w->pool, rms_task, &j);
    }
    j.norm = m->out_norm, j.src = w->x, j.dst = w->h, j.add = 0;
    thread_pool_run(w->pool, rms_task, &j);
    if (!d->dense2.data) {
        model_enc_pool(&bt, w->h, E, pooling, out);
        return;
    }
    model_enc_pool(&bt, w->h, E, pooling, w->pooled);
    kern_matmul(w->pool, &d->dense2, w->pooled, n_seq, w->proj, d->d2, w->mm_scratch);
    kern_matmul(w->pool, &d->dense3, w->proj, n_seq, out, E, w->mm_scratch);
}

static const model_arch k_archs[] = {
    {"gemma-embedding", &model_family_gemma_embed, 1, 0}, /* EmbeddingGemma */
};

const model_family model_family_gemma_embed = {
    .name = "gemma-embedding",
    .archs = k_archs,
    .n_archs = sizeof k_archs / sizeof k_archs[0],
    .encoder = 1,
    .bind = ge_bind,
    .free = ge_free,
    .weights = ge_weights,
    .enc_new = ge_ws_new,
    .enc_free = ge_ws_free,
    .encode = ge_encode,
    .embed_query = "task: search result | query: {text}",
    .embed_document = "title: {title} | text: {text}",
};
