/*
 * The ModernBERT family (general.architecture "modern-bert", llama.cpp's
 * tensor names and keys).  Per token row of n_embd, pre-norm, no biases:
 *
 *   x = LN(tok[id])                                        token_embd_norm
 *   per layer l:
 *     h = LN(x) * attn_norm        (layer 0 has no attn_norm: h = x)
 *     q, k, v = split(attn_qkv h)  (fused, in that order)
 *     x += attn_output attn(rope(q), rope(k), v)
 *     u = ffn_up LN(x) * ffn_norm  ([2 n_ff]: the first half is activated)
 *     x += ffn_down (act(u[:n_ff]) * u[n_ff:])
 *   x = LN(x) * output_norm
 *
 * Attention alternates global and local layers: layer l is global when
 * l % sliding_window_pattern == 0 (G L L G L L ... for the default 3), a
 * local layer lets token t see u only when |t - u| <= sliding_window / 2.
 * RoPE is NeoX-style with rope.freq_base on global layers and
 * rope.freq_base_swa on local ones.  The activation is {arch}.hidden_activation:
 * "gelu" (the default: exact erf GELU, as the checkpoints were trained;
 * llama.cpp uses the tanh form), "gelu_pytorch_tanh"/"gelu_new" (tanh),
 * "silu"/"swiglu" or "relu".  LayerNorms have no bias; epsilon from
 * {arch}.attention.layer_norm_epsilon.
 *
 * A reranker (ModernBertForSequenceClassification) carries a head read
 * from the mean of the final rows (rank pooling, as llama.cpp does):
 *   score = cls.output(LN(gelu(cls x + cls.b)) * cls.norm) + cls.output.b
 * cls and cls.norm optional; cls.output has one row per score.
 */
#include "model/encoder.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ACT_GELU_ERF, ACT_GELU_TANH, ACT_SILU, ACT_RELU };

typedef struct mb_layer {
    const float *attn_norm; /* [n_embd], NULL in layer 0 */
    kern_mat wqkv, wo;      /* n_embd -> 3 n_embd, n_embd -> n_embd */
    const float *ffn_norm;  /* [n_embd] */
    kern_mat w_up, w_down;  /* n_embd -> 2 n_ff, n_ff -> n_embd */
    int local;              /* sliding-window layer */
} mb_layer;

typedef struct mb_model {
    const float *emb_norm, *emb_norm_b;
    float eps;
    int window;           /* half width of a local layer's window */
    int act;              /* ACT_* */
    kern_rope rope_local; /* m->hp.rope is the global layers' */
    mb_layer *layers;
    kern_mat cls, cls_out; /* head; cls_out.data NULL when absent */
    const float *cls_b, *cls_norm, *cls_norm_b, *cls_out_b;
} mb_model;

/* ---------------------------------------------------------------- binding */

static void mb_free(kiln_model *m) {
    mb_model *d = m->fam;
    if (!d) return;
    free(d->layers);
    free(d);
}

/* Which layers are local: {arch}.attention.sliding_window_pattern is a
 * period (layer l global when l % period == 0) or one flag per layer. */
static kiln_status mb_pattern(kiln_model *m, mb_model *d, int n_swa) {
    const int n = m->hp.n_layer;
    const gguf_kv *kv = model_meta_kv(m, "attention.sliding_window_pattern");
    if (n_swa <= 0) return 0; /* every layer global */
    if (kv && kv->type == GGUF_ARRAY) {
        if ((int64_t)kv->n != n || kv->arr_type == GGUF_STRING || kv->arr_type == GGUF_ARRAY) {
            return base_fail(KILN_ERR_FORMAT, "modern-bert: sliding_window_pattern has %llu entries for %d layers",
                             (unsigned long long)kv->n, n);
        }
        for (int l = 0; l < n; l++) d->layers[l].local = gguf_arr_int(kv, (uint64_t)l) != 0;
        return 0;
    }
    const int64_t period = model_meta_int(m, "attention.sliding_window_pattern", 3);
    if (period < 0 || period > 1024) {
        return base_fail(KILN_ERR_FORMAT, "modern-bert: bad sliding_window_pattern %lld", (long long)period);
    }
    for (int l = 0; l < n; l++) d->layers[l].local = period == 0 || l % period != 0;
    return 0;
}

static kiln_status mb_bind(kiln_model *m) {
    model_hparams *hp = &m->hp;
    if (hp->n_head_kv != hp->n_head || hp->hd_k * hp->n_head != hp->n_embd) {
        return base_fail(KILN_ERR_FORMAT,
                         "modern-bert needs n_head_kv == n_head and head size n_embd/n_head (got %d/%d heads, %d)",
                         hp->n_head_kv, hp->n_head, hp->hd_k);
    }
    if (hp->n_ff <= 0) { return base_fail(KILN_ERR_FORMAT, "bad or missing feed_forward_length (%d)", hp->n_ff); }
    mb_model *d = calloc(1, sizeof *d);
    if (d) d->layers = calloc((size_t)hp->n_layer, sizeof *d->layers);
    m->fam = d;
    if (!d || !d->layers) { return base_fail(KILN_ERR_NOMEM, "out of memory"); }
    d->eps = (float)model_meta_float(m, "attention.layer_norm_epsilon", 1e-5);
    char act[32];
    char key[96];
    snprintf(key, sizeof key, "%s.hidden_activation", m->arch_name);
    const char *a = gguf_get_cstr(m->gf, key, act, sizeof act, "gelu");
    if (!strcmp(a, "gelu") || !strcmp(a, "geglu"))
        d->act = ACT_GELU_ERF;
    else if (!strcmp(a, "gelu_pytorch_tanh") || !strcmp(a, "gelu_new"))
        d->act = ACT_GELU_TANH;
    else if (!strcmp(a, "silu") || !strcmp(a, "swish") || !strcmp(a, "swiglu"))
        d->act = ACT_SILU;
    else if (!strcmp(a, "relu") || !strcmp(a, "reglu"))
        d->act = ACT_RELU;
    else {
        return base_fail(KILN_ERR_UNSUPPORTED, "unsupported %s '%s' (kiln runs gelu, gelu_pytorch_tanh, silu, relu)",
                         key, a);
    }
    const int64_t n_swa = model_meta_int(m, "attention.sliding_window", 0);
    if (n_swa < 0 || n_swa > (1 << 24)) {
        return base_fail(KILN_ERR_FORMAT, "modern-bert: bad sliding_window %lld", (long long)n_swa);
    }
    d->window = (int)(n_swa / 2);
    kiln_status st = mb_pattern(m, d, (int)n_swa);
    if (st) return st;
    hp->rope.neox = 1;
    d->rope_local = hp->rope;
    d->rope_local.base = (float)model_meta_float(m, "rope.freq_base_swa", 10000.0);
    if (!(d->rope_local.base > 0.0f) || !isfinite(d->rope_local.base)) {
        return base_fail(KILN_ERR_FORMAT, "bad rope.freq_base_swa");
    }

    model_binder B = {m, KILN_OK};
    const int64_t E = hp->n_embd, F = hp->n_ff;
    m->tok_embd = model_bind_mat(&B, "token_embd.weight", E, -1, 0);
    hp->n_vocab = (int)m->tok_embd.nrows;
    d->emb_norm = model_bind_vec(&B, "token_embd_norm.weight", E, 0);
    d->emb_norm_b = model_bind_vec(&B, "token_embd_norm.bias", E, 1);
    m->out_norm = model_bind_vec(&B, "output_norm.weight", E, 0);
    for (int i = 0; i < hp->n_layer && !B.st; i++) {
        mb_layer *l = &d->layers[i];
        char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", i, s), n)
        l->attn_norm = model_bind_vec(&B, NAME("attn_norm.weight"), E, i == 0);
        l->wqkv = model_bind_mat(&B, NAME("attn_qkv.weight"), E, 3 * E, 0);
        l->wo = model_bind_mat(&B, NAME("attn_output.weight"), E, E, 0);
        l->ffn_norm = model_bind_vec(&B, NAME("ffn_norm.weight"), E, 0);
        l->w_up = model_bind_mat(&B, NAME("ffn_up.weight"), E, 2 * F, 0);
        l->w_down = model_bind_mat(&B, NAME("ffn_down.weight"), F, E, 0);
#undef NAME
    }
    d->cls_out = model_bind_mat(&B, "cls.output.weight", E, -1, 1);
    if (d->cls_out.data) {
        hp->n_cls_out = (int)d->cls_out.nrows;
        d->cls_out_b = model_bind_vec(&B, "cls.output.bias", hp->n_cls_out, 1);
        d->cls = model_bind_mat(&B, "cls.weight", E, E, 1);
        d->cls_b = model_bind_vec(&B, "cls.bias", E, 1);
        d->cls_norm = model_bind_vec(&B, "cls.norm.weight", E, 1);
        d->cls_norm_b = model_bind_vec(&B, "cls.norm.bias", E, 1);
        const gguf_kv *labels = model_meta_kv(m, "classifier.output_labels");
        if (!B.st && labels && (labels->type != GGUF_ARRAY || (int64_t)labels->n != hp->n_cls_out))
            model_bind_fail(&B, "%s.classifier.output_labels has %lld entries but cls.output.weight %d rows",
                            m->arch_name, labels->type == GGUF_ARRAY ? (long long)labels->n : -1LL, hp->n_cls_out);
    }
    return B.st;
}

static void mb_weights(kiln_model *m, model_weights *w) {
    mb_model *d = m->fam;
    for (int i = 0; i < m->hp.n_layer; i++) {
        mb_layer *l = &d->layers[i];
        model_weights_mat(w, &l->wqkv);
        model_weights_mat(w, &l->wo);
        model_weights_mat(w, &l->w_up);
        model_weights_mat(w, &l->w_down);
        if (l->attn_norm) model_weights_vec(w, &l->attn_norm, m->hp.n_embd);
        model_weights_vec(w, &l->ffn_norm, m->hp.n_embd);
    }
    model_weights_vec(w, &m->out_norm, m->hp.n_embd);
    model_weights_vec(w, &d->emb_norm, m->hp.n_embd);
}

/* ---------------------------------------------------------------- forward */

typedef struct mb_ws {
    thread_pool *pool;
    int cap_tok;
    float *x, *h, *att;          /* [cap_tok][n_embd] residual, normalized input, attention output */
    float *qkv;                  /* [cap_tok][3 n_embd] */
    float *up, *g;               /* [cap_tok][2 n_ff], [cap_tok][n_ff] */
    float *cs_global, *cs_local; /* [cap_tok][n_rot] rotation tables by position */
    float *scratch;              /* attention scores */
    int32_t *off, *seq;
    float *pooled; /* [cap_tok][n_embd] (rank pooling) */
    void *mm_scratch;
} mb_ws;

static void mb_ws_free(void *ws) {
    mb_ws *w = ws;
    if (!w) return;
    void *bufs[] = {w->x,        w->h,       w->att, w->qkv, w->up,     w->g,         w->cs_global,
                    w->cs_local, w->scratch, w->off, w->seq, w->pooled, w->mm_scratch};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(w);
}

static void *mb_ws_new(const kiln_model *m, int cap_tok, thread_pool *pool) {
    const mb_model *d = m->fam;
    const size_t N = (size_t)cap_tok, E = (size_t)m->hp.n_embd, F = (size_t)m->hp.n_ff;
    const size_t R = (size_t)m->hp.rope.n_rot;
    mb_ws *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->pool = pool;
    w->cap_tok = cap_tok;
    int ok = (w->x = malloc(N * E * 4)) && (w->h = malloc(N * E * 4)) && (w->att = malloc(N * E * 4)) &&
             (w->qkv = malloc(N * 3 * E * 4)) && (w->up = malloc(N * 2 * F * 4)) && (w->g = malloc(N * F * 4)) &&
             (w->cs_global = malloc(N * R * 4)) && (w->cs_local = malloc(N * R * 4)) &&
             (w->scratch = malloc(model_enc_attn_scratch(pool, cap_tok) * 4)) &&
             (w->off = malloc((N + 1) * sizeof *w->off)) && (w->seq = malloc(N * sizeof *w->seq)) &&
             (w->pooled = malloc((m->hp.n_cls_out ? N : 1) * E * 4)) &&
             (w->mm_scratch = malloc(kern_matmul_scratch_size((int64_t)(E > F ? E : F), cap_tok)));
    if (!ok) {
        mb_ws_free(w);
        return NULL;
    }
    /* positions never exceed cap_tok - 1 within one sequence */
    for (int t = 0; t < cap_tok; t++) {
        kern_rope_table(&m->hp.rope, t, w->cs_global + (size_t)t * R);
        kern_rope_table(&d->rope_local, t, w->cs_local + (size_t)t * R);
    }
    return w;
}

typedef struct mb_job {
    mb_ws *w;
    const kiln_model *m;
    const mb_layer *L;
    const model_enc_batch *b;
    const float *norm; /* norm_task: h = LN(x) * norm (NULL: h = x) */
} mb_job;

static void norm_task(void *ud, int ith, int nth) {
    mb_job *j = ud;
    const mb_model *d = j->m->fam;
    const int E = j->m->hp.n_embd;
    long lo, hi;
    thread_pool_range(j->b->n_rows, ith, nth, &lo, &hi);
    for (long r = lo; r < hi; r++) {
        const float *x = j->w->x + (size_t)r * E;
        float *h = j->w->h + (size_t)r * E;
        if (j->norm)
            kern_layernorm(h, x, j->norm, NULL, E, d->eps);
        else
            memcpy(h, x, (size_t)E * sizeof *h);
    }
}

static void rope_task(void *ud, int ith, int nth) {
    mb_job *j = ud;
    const model_hparams *hp = &j->m->hp;
    const mb_model *d = j->m->fam;
    const int E = hp->n_embd, R = hp->rope.n_rot;
    const kern_rope *rp = j->L->local ? &d->rope_local : &hp->rope;
    const float *tab = j->L->local ? j->w->cs_local : j->w->cs_global;
    long lo, hi;
    thread_pool_range(j->b->n_rows, ith, nth, &lo, &hi);
    for (long r = lo; r < hi; r++) {
        const int t = (int)r - j->b->off[j->b->seq[r]];
        float *q = j->w->qkv + (size_t)r * 3 * E;
        kern_rope_apply(rp, tab + (size_t)t * R, q, hp->n_head, hp->hd_k);
        kern_rope_apply(rp, tab + (size_t)t * R, q + E, hp->n_head, hp->hd_k);
    }
}

static void glu_task(void *ud, int ith, int nth) {
    mb_job *j = ud;
    const mb_model *d = j->m->fam;
    const int F = j->m->hp.n_ff;
    long lo, hi;
    thread_pool_range(j->b->n_rows, ith, nth, &lo, &hi);
    for (long r = lo; r < hi; r++) {
        const float *u = j->w->up + (size_t)r * 2 * F;
        float *g = j->w->g + (size_t)r * F;
        memcpy(g, u, (size_t)F * sizeof *g);
        switch (d->act) {
        case ACT_GELU_ERF: kern_gelu_erf(g, F); break;
        case ACT_GELU_TANH: kern_gelu(g, F); break;
        case ACT_SILU:
            for (int i = 0; i < F; i++) g[i] = g[i] / (1.0f + expf(-g[i]));
            break;
        default:
            for (int i = 0; i < F; i++) g[i] = g[i] > 0.0f ? g[i] : 0.0f;
        }
        for (int i = 0; i < F; i++) g[i] *= u[F + i];
    }
}

static void add_task(void *ud, int ith, int nth) {
    mb_job *j = ud;
    const int E = j->m->hp.n_embd;
    long lo, hi;
    thread_pool_range(j->b->n_rows, ith, nth, &lo, &hi);
    kern_add(j->w->x + (size_t)lo * E, j->w->h + (size_t)lo * E, (int)((hi - lo) * E));
}

static void mb_rank_head(mb_ws *w, const kiln_model *m, int n_seq, float *out) {
    const mb_model *d = m->fam;
    const int E = m->hp.n_embd, C = m->hp.n_cls_out;
    const float *h = w->pooled;
    if (d->cls.data) {
        kern_matmul(w->pool, &d->cls, w->pooled, n_seq, w->h, E, w->mm_scratch);
        for (int s = 0; s < n_seq; s++) {
            float *r = w->h + (size_t)s * E;
            if (d->cls_b) kern_add(r, d->cls_b, E);
            if (d->act == ACT_GELU_TANH)
                kern_gelu(r, E);
            else
                kern_gelu_erf(r, E);
            if (d->cls_norm) kern_layernorm(r, r, d->cls_norm, d->cls_norm_b, E, d->eps);
        }
        h = w->h;
    }
    kern_matmul(w->pool, &d->cls_out, h, n_seq, out, C, w->mm_scratch);
    if (d->cls_out_b) kern_add_rows(out, d->cls_out_b, n_seq, C);
}

static void mb_encode(void *ws, const kiln_model *m, const int32_t *tokens, const uint8_t *types, const int32_t *len,
                      int n_seq, int pooling, float *out) {
    mb_ws *w = ws;
    const model_hparams *hp = &m->hp;
    const mb_model *d = m->fam;
    const int E = hp->n_embd, F = hp->n_ff;
    model_enc_batch bt;
    model_enc_batch_init(&bt, len, n_seq, w->off, w->seq);
    const int N = bt.n_rows;
    mb_job j = {w, m, NULL, &bt, NULL};

    for (int r = 0; r < N; r++) {
        float *x = w->x + (size_t)r * E;
        kern_get_row(&m->tok_embd, tokens[r], x);
        kern_layernorm(x, x, d->emb_norm, d->emb_norm_b, E, d->eps);
    }
    model_enc_attn at = {&bt,
                         w->qkv,
                         w->qkv + E,
                         w->qkv + 2 * E,
                         3 * E,
                         3 * E,
                         w->att,
                         E,
                         hp->n_head,
                         hp->n_head,
                         hp->hd_k,
                         -1,
                         1.0f / sqrtf((float)hp->hd_k),
                         w->scratch};
    for (int l = 0; l < hp->n_layer; l++) {
        const mb_layer *L = &d->layers[l];
        j.L = L;
        j.norm = L->attn_norm;
        thread_pool_run(w->pool, norm_task, &j);
        kern_matmul(w->pool, &L->wqkv, w->h, N, w->qkv, 3 * E, w->mm_scratch);
        thread_pool_run(w->pool, rope_task, &j);
        at.window = L->local ? d->window : -1;
        model_enc_attention(w->pool, &at);
        kern_matmul(w->pool, &L->wo, w->att, N, w->h, E, w->mm_scratch);
        thread_pool_run(w->pool, add_task, &j);

        j.norm = L->ffn_norm;
        thread_pool_run(w->pool, norm_task, &j);
        kern_matmul(w->pool, &L->w_up, w->h, N, w->up, 2 * F, w->mm_scratch);
        thread_pool_run(w->pool, glu_task, &j);
        kern_matmul(w->pool, &L->w_down, w->g, N, w->h, E, w->mm_scratch);
        thread_pool_run(w->pool, add_task, &j);
    }
    for (int r = 0; r < N; r++) {
        float *x = w->x + (size_t)r * E;
        kern_layernorm(x, x, m->out_norm, NULL, E, d->eps);
    }
    if (pooling == MODEL_POOL_RANK) {
        model_enc_pool(&bt, w->x, E, MODEL_POOL_MEAN, w->pooled);
        mb_rank_head(w, m, n_seq, out);
    } else {
        model_enc_pool(&bt, w->x, E, pooling, out);
    }
}

static const model_arch k_archs[] = {
    {"modern-bert", &model_family_modernbert, 1, 0}, /* ModernBERT, gte-modernbert, Granite Embedding R2 */
};

const model_family model_family_modernbert = {
    .name = "modernbert",
    .archs = k_archs,
    .n_archs = sizeof k_archs / sizeof k_archs[0],
    .encoder = 1,
    .bind = mb_bind,
    .free = mb_free,
    .weights = mb_weights,
    .enc_new = mb_ws_new,
    .enc_free = mb_ws_free,
    .pair = MODEL_PAIR_CLS_SEP,
    .encode = mb_encode,
};
