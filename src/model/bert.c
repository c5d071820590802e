/*
 * The bert family: the encoder architecture (general.architecture "bert", llama.cpp
 * tensor names and keys).  Per token row of n_embd:
 *
 *   x = LN(tok[id] + type[0] + pos[t])                       token_embd_norm
 *   per layer, post-norm:
 *     x = LN(x + O(attn(Qx + bq, Kx + bk, Vx + bv)) + bo)    attn_output_norm
 *     x = LN(x + down(gelu(up x + b_up)) + b_down)           layer_output_norm
 *
 * Attention is bidirectional over the real tokens of the row's own
 * sequence; padding rows are never attended to.  GELU is the tanh
 * approximation ggml_gelu uses (kk_gelu).  LayerNorm epsilon comes from
 * bert.attention.layer_norm_epsilon.
 */
#include "model/model.h"

#include "quant/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct kl_bert_layer {
    kk_mat wq, wk, wv, wo;              /* n_embd -> n_embd */
    const float *bq, *bk, *bv, *bo;     /* [n_embd] */
    const float *ln_attn_w, *ln_attn_b; /* attn_output_norm [n_embd] */
    kk_mat w_up, w_down;                /* n_embd -> n_ff -> n_embd */
    const float *b_up, *b_down;         /* [n_ff], [n_embd] */
    const float *ln_out_w, *ln_out_b;   /* layer_output_norm [n_embd] */
} kl_bert_layer;

struct kl_bert {
    kk_mat pos_embd;              /* [n_pos rows of n_embd] */
    kk_mat type_embd;             /* [n_types rows]; data NULL when absent */
    const float *emb_norm_w, *emb_norm_b;
    float eps;                    /* LayerNorm epsilon */
    int n_pos;                    /* longest input the positions allow */
    kl_bert_layer *layers;
};

/* ---------------------------------------------------------------- binding */

static void bert_free_data(struct kl_bert *b);

static int bert_bind(kiln_model *m, char *err, size_t errlen) {
    kl_hparams *hp = &m->hp;
    if (hp->n_head_kv != hp->n_head || hp->hd_k * hp->n_head != hp->n_embd) {
        snprintf(err, errlen, "bert needs n_head_kv == n_head and head size n_embd/n_head (got %d/%d heads, %d)",
                 hp->n_head_kv, hp->n_head, hp->hd_k);
        return -1;
    }
    if (hp->n_ff <= 0) {
        snprintf(err, errlen, "bad or missing feed_forward_length (%d)", hp->n_ff);
        return -1;
    }
    struct kl_bert *b = calloc(1, sizeof *b);
    if (b) b->layers = calloc((size_t)hp->n_layer, sizeof *b->layers);
    if (!b || !b->layers) {
        bert_free_data(b);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    m->fam = b;
    b->eps = (float)gguf_get_float(m->gf, "bert.attention.layer_norm_epsilon", 1e-12);
    kl_binder B = {m, err, errlen, 0};
    const int64_t E = hp->n_embd, F = hp->n_ff;
    m->tok_embd = kl_bind_mat(&B, "token_embd.weight", E, -1, 0);
    hp->n_vocab = (int)m->tok_embd.nrows;
    b->type_embd = kl_bind_mat(&B, "token_types.weight", E, -1, 1);
    b->pos_embd = kl_bind_mat(&B, "position_embd.weight", E, -1, 0);
    b->n_pos = (int)b->pos_embd.nrows;
    b->emb_norm_w = kl_bind_vec(&B, "token_embd_norm.weight", E, 0);
    b->emb_norm_b = kl_bind_vec(&B, "token_embd_norm.bias", E, 0);
    for (int i = 0; i < hp->n_layer && !B.failed; i++) {
        kl_bert_layer *l = &b->layers[i];
        char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", i, s), n)
        l->wq = kl_bind_mat(&B, NAME("attn_q.weight"), E, E, 0);
        l->wk = kl_bind_mat(&B, NAME("attn_k.weight"), E, E, 0);
        l->wv = kl_bind_mat(&B, NAME("attn_v.weight"), E, E, 0);
        l->wo = kl_bind_mat(&B, NAME("attn_output.weight"), E, E, 0);
        l->bq = kl_bind_vec(&B, NAME("attn_q.bias"), E, 0);
        l->bk = kl_bind_vec(&B, NAME("attn_k.bias"), E, 0);
        l->bv = kl_bind_vec(&B, NAME("attn_v.bias"), E, 0);
        l->bo = kl_bind_vec(&B, NAME("attn_output.bias"), E, 0);
        l->ln_attn_w = kl_bind_vec(&B, NAME("attn_output_norm.weight"), E, 0);
        l->ln_attn_b = kl_bind_vec(&B, NAME("attn_output_norm.bias"), E, 0);
        l->w_up = kl_bind_mat(&B, NAME("ffn_up.weight"), E, F, 0);
        l->b_up = kl_bind_vec(&B, NAME("ffn_up.bias"), F, 0);
        l->w_down = kl_bind_mat(&B, NAME("ffn_down.weight"), F, E, 0);
        l->b_down = kl_bind_vec(&B, NAME("ffn_down.bias"), E, 0);
        l->ln_out_w = kl_bind_vec(&B, NAME("layer_output_norm.weight"), E, 0);
        l->ln_out_b = kl_bind_vec(&B, NAME("layer_output_norm.bias"), E, 0);
#undef NAME
    }
    if (B.failed) return -1;
    if (hp->n_vocab <= 0 || b->n_pos <= 0) {
        snprintf(err, errlen, "bert embedding tables are empty");
        return -1;
    }
    if (b->n_pos < hp->n_ctx_train) hp->n_ctx_train = b->n_pos;
    return 0;
}

static void bert_free_data(struct kl_bert *b) {
    if (!b) return;
    free(b->layers);
    free(b);
}

static void bert_free(kiln_model *m) { bert_free_data(m->fam); }

/* ---------------------------------------------------------------- forward */

typedef struct kl_bert_ws {
    kpool *pool;
    int cap_tok;
    float *x, *y;            /* [cap_tok][n_embd] residual stream, sublayer output */
    float *q, *k, *v, *att;  /* [cap_tok][n_embd] */
    float *up;               /* [cap_tok][n_ff] */
    float *scores;           /* per thread [cap_tok] attention weights */
    void *mm_scratch;
} kl_bert_ws;

static void bert_ws_free(void *ws);

static void *bert_ws_new(const kiln_model *m, int cap_tok, kpool *pool) {
    const size_t N = (size_t)cap_tok, E = (size_t)m->hp.n_embd, F = (size_t)m->hp.n_ff;
    kl_bert_ws *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->pool = pool;
    w->cap_tok = cap_tok;
    float **bufs[] = {&w->x, &w->y, &w->q, &w->k, &w->v, &w->att};
    int ok = 1;
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) ok &= (*bufs[i] = malloc(N * E * 4)) != NULL;
    ok &= (w->up = malloc(N * F * 4)) != NULL;
    ok &= (w->scores = malloc((size_t)kpool_size(pool) * N * 4)) != NULL;
    ok &= (w->mm_scratch = malloc(kk_matmul_scratch_size((int64_t)(E > F ? E : F), cap_tok))) != NULL;
    if (!ok) {
        bert_ws_free(w);
        return NULL;
    }
    return w;
}

static void bert_ws_free(void *ws) {
    kl_bert_ws *w = ws;
    if (!w) return;
    void *bufs[] = {w->x, w->y, w->q, w->k, w->v, w->att, w->up, w->scores, w->mm_scratch};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(w);
}

typedef struct fwd_job {
    kl_bert_ws *w;
    const kiln_model *m;
    const kl_bert_layer *L;
    const int32_t *len;
    int n_seq, T;
} fwd_job;

/* Is row r = s * T + t a real token? */
static int real_row(const fwd_job *j, long r) { return r % j->T < j->len[r / j->T]; }

/* One (row, head) per work item: softmax(q k^T / sqrt(hd)) v over the real
 * tokens of the row's sequence.  Padding rows get zeros. */
static void attn_task(void *ud, int ith, int nth) {
    fwd_job *j = ud;
    const kl_hparams *hp = &j->m->hp;
    const int E = hp->n_embd, H = hp->n_head, hd = hp->hd_k;
    const float scale = 1.0f / sqrtf((float)hd);
    float *p = j->w->scores + (size_t)ith * (size_t)j->w->cap_tok;
    long lo, hi;
    kpool_range((long)j->n_seq * j->T * H, ith, nth, &lo, &hi);
    for (long it = lo; it < hi; it++) {
        long r = it / H;
        int h = (int)(it % H), s = (int)(r / j->T), n = j->len[s];
        float *o = j->w->att + (size_t)r * E + (size_t)h * hd;
        memset(o, 0, (size_t)hd * sizeof *o);
        if (!real_row(j, r)) continue;
        const float *q = j->w->q + (size_t)r * E + (size_t)h * hd;
        const size_t r0 = (size_t)s * (size_t)j->T;
        float mx = -INFINITY;
        for (int u = 0; u < n; u++) {
            p[u] = kk_dot_f32(q, j->w->k + (r0 + (size_t)u) * E + (size_t)h * hd, hd) * scale;
            if (p[u] > mx) mx = p[u];
        }
        double sum = 0.0;
        for (int u = 0; u < n; u++) sum += p[u] = expf(p[u] - mx);
        const float inv = (float)(1.0 / sum);
        for (int u = 0; u < n; u++)
            kk_scale_axpy_f32(o, 1.0f, p[u] * inv, j->w->v + (r0 + (size_t)u) * E + (size_t)h * hd, hd);
    }
}

/* Per row: x = LN(x + y + bias) with the given norm (after attention or FFN). */
typedef struct norm_job {
    fwd_job *f;
    const float *bias, *w, *b;
} norm_job;

static void residual_norm_task(void *ud, int ith, int nth) {
    norm_job *nj = ud;
    fwd_job *j = nj->f;
    const int E = j->m->hp.n_embd;
    long lo, hi;
    kpool_range((long)j->n_seq * j->T, ith, nth, &lo, &hi);
    for (long r = lo; r < hi; r++) {
        float *x = j->w->x + (size_t)r * E;
        kk_add(x, j->w->y + (size_t)r * E, E);
        kk_add(x, nj->bias, E);
        kk_layernorm(x, x, nj->w, nj->b, E, ((const struct kl_bert *)j->m->fam)->eps);
    }
}

static void up_gelu_task(void *ud, int ith, int nth) {
    fwd_job *j = ud;
    const int F = j->m->hp.n_ff;
    long lo, hi;
    kpool_range((long)j->n_seq * j->T, ith, nth, &lo, &hi);
    for (long r = lo; r < hi; r++) {
        float *u = j->w->up + (size_t)r * F;
        kk_add(u, j->L->b_up, F);
        kk_gelu(u, F);
    }
}

static void bert_encode(void *ws, const kiln_model *m, const int32_t *tokens, const int32_t *len, int n_seq, int T,
                        int pooling, float *out) {
    kl_bert_ws *w = ws;
    const kl_hparams *hp = &m->hp;
    const struct kl_bert *b = m->fam;
    const int E = hp->n_embd, N = n_seq * T;
    fwd_job j = {w, m, NULL, len, n_seq, T};

    /* embeddings; padding rows stay zero (their LayerNorm gives the bias) */
    float *tmp = w->y;
    for (int r = 0; r < N; r++) {
        float *x = w->x + (size_t)r * E;
        int t = r % T;
        if (!real_row(&j, r)) {
            memset(x, 0, (size_t)E * sizeof *x);
            kk_layernorm(x, x, b->emb_norm_w, b->emb_norm_b, E, b->eps);
            continue;
        }
        kk_get_row(&m->tok_embd, tokens[r], x);
        kk_get_row(&b->pos_embd, t, tmp);
        kk_add(x, tmp, E);
        if (b->type_embd.data) {
            kk_get_row(&b->type_embd, 0, tmp);
            kk_add(x, tmp, E);
        }
        kk_layernorm(x, x, b->emb_norm_w, b->emb_norm_b, E, b->eps);
    }

    for (int l = 0; l < hp->n_layer; l++) {
        const kl_bert_layer *L = &b->layers[l];
        j.L = L;
        kk_mm_out qkv[3] = {{&L->wq, w->q, E}, {&L->wk, w->k, E}, {&L->wv, w->v, E}};
        kk_matmul_multi(w->pool, qkv, 3, w->x, N, w->mm_scratch);
        kk_add_rows(w->q, L->bq, N, E);
        kk_add_rows(w->k, L->bk, N, E);
        kk_add_rows(w->v, L->bv, N, E);
        kpool_run(w->pool, attn_task, &j);
        kk_matmul(w->pool, &L->wo, w->att, N, w->y, E, w->mm_scratch);
        norm_job na = {&j, L->bo, L->ln_attn_w, L->ln_attn_b};
        kpool_run(w->pool, residual_norm_task, &na);

        kk_matmul(w->pool, &L->w_up, w->x, N, w->up, hp->n_ff, w->mm_scratch);
        kpool_run(w->pool, up_gelu_task, &j);
        kk_matmul(w->pool, &L->w_down, w->up, N, w->y, E, w->mm_scratch);
        norm_job nf = {&j, L->b_down, L->ln_out_w, L->ln_out_b};
        kpool_run(w->pool, residual_norm_task, &nf);
    }

    for (int s = 0; s < n_seq; s++) {
        const float *rows = w->x + (size_t)s * T * E;
        float *o = out + (size_t)s * E;
        if (pooling == KILN_POOLING_MEAN) {
            for (int d = 0; d < E; d++) {
                double acc = 0.0;
                for (int t = 0; t < len[s]; t++) acc += rows[(size_t)t * E + d];
                o[d] = (float)(acc / len[s]);
            }
        } else {
            int t = pooling == KILN_POOLING_LAST ? len[s] - 1 : 0;
            memcpy(o, rows + (size_t)t * E, (size_t)E * sizeof *o);
        }
    }
}

static const kl_arch k_archs[] = {
    {"bert", &kl_family_bert, 1, 0}, /* BERT, bge, e5, MiniLM (absolute positions) */
};

const kl_family kl_family_bert = {
    .name = "bert",
    .archs = k_archs,
    .n_archs = sizeof k_archs / sizeof k_archs[0],
    .encoder = 1,
    .bind = bert_bind,
    .free = bert_free,
    .enc_new = bert_ws_new,
    .enc_free = bert_ws_free,
    .encode = bert_encode,
};
