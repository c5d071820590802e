/* The bert encoder: tensor binding and the padded, masked forward pass
 * (math in bert.h). */
#include "model/bert.h"

#include "quant/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- binding */

typedef struct binder {
    const gguf_file *gf;
    char *err;
    size_t errlen;
    int failed;
} binder;

/* Tensor `name` with exactly [ne0] (ne1 == 0) or [ne0, ne1]; ne1 < 0 takes
 * any row count.  Missing is an error unless optional. */
static const gguf_tensor *find(binder *B, const char *name, int64_t ne0, int64_t ne1, int optional) {
    if (B->failed) return NULL;
    const gguf_tensor *t = gguf_find_tensor(B->gf, name);
    if (!t) {
        if (!optional) {
            snprintf(B->err, B->errlen, "missing tensor %s", name);
            B->failed = 1;
        }
        return NULL;
    }
    int dims = ne1 ? 2 : 1;
    if ((int)t->n_dims != dims || t->ne[0] != ne0 || (ne1 > 0 && t->ne[1] != ne1) || (dims == 2 && t->ne[1] < 1)) {
        snprintf(B->err, B->errlen, "tensor %s has shape [%lld, %lld] (%u dims), expected [%lld, %lld]", name,
                 (long long)t->ne[0], (long long)t->ne[1], t->n_dims, (long long)ne0, (long long)ne1);
        B->failed = 1;
        return NULL;
    }
    if (!kq_supported((int)t->type) || (dims == 1 && t->type != KQ_F32)) {
        const kq_traits *tr = kq_get((int)t->type);
        snprintf(B->err, B->errlen, "tensor %s has type %s, which kiln cannot compute here", name,
                 tr && tr->name ? tr->name : "?");
        B->failed = 1;
        return NULL;
    }
    return t;
}

static const float *vec(binder *B, const char *name, int64_t n) {
    const gguf_tensor *t = find(B, name, n, 0, 0);
    return t ? t->data : NULL;
}

static kk_mat mat(binder *B, const char *name, int64_t ncols, int64_t nrows, int optional) {
    kk_mat w = {0};
    const gguf_tensor *t = find(B, name, ncols, nrows, optional);
    if (!t) return w;
    w.data = t->data;
    w.type = (int)t->type;
    w.ncols = ncols;
    w.nrows = t->ne[1];
    return w;
}

int kl_bert_bind(kiln_model *m, char *err, size_t errlen) {
    kl_hparams *hp = &m->hp;
    if (hp->n_head_kv != hp->n_head || hp->hd_k * hp->n_head != hp->n_embd) {
        snprintf(err, errlen, "bert needs n_head_kv == n_head and head size n_embd/n_head (got %d/%d heads, %d)",
                 hp->n_head_kv, hp->n_head, hp->hd_k);
        return -1;
    }
    struct kl_bert *b = calloc(1, sizeof *b);
    if (b) b->layers = calloc((size_t)hp->n_layer, sizeof *b->layers);
    if (!b || !b->layers) {
        kl_bert_free(b);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    m->bert = b;
    b->eps = (float)gguf_get_float(m->gf, "bert.attention.layer_norm_epsilon", 1e-12);
    binder B = {m->gf, err, errlen, 0};
    const int64_t E = hp->n_embd, F = hp->n_ff;
    m->tok_embd = mat(&B, "token_embd.weight", E, -1, 0);
    hp->n_vocab = (int)m->tok_embd.nrows;
    b->type_embd = mat(&B, "token_types.weight", E, -1, 1);
    b->pos_embd = mat(&B, "position_embd.weight", E, -1, 0);
    b->n_pos = (int)b->pos_embd.nrows;
    b->emb_norm_w = vec(&B, "token_embd_norm.weight", E);
    b->emb_norm_b = vec(&B, "token_embd_norm.bias", E);
    for (int i = 0; i < hp->n_layer && !B.failed; i++) {
        kl_bert_layer *l = &b->layers[i];
        char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", i, s), n)
        l->wq = mat(&B, NAME("attn_q.weight"), E, E, 0);
        l->wk = mat(&B, NAME("attn_k.weight"), E, E, 0);
        l->wv = mat(&B, NAME("attn_v.weight"), E, E, 0);
        l->wo = mat(&B, NAME("attn_output.weight"), E, E, 0);
        l->bq = vec(&B, NAME("attn_q.bias"), E);
        l->bk = vec(&B, NAME("attn_k.bias"), E);
        l->bv = vec(&B, NAME("attn_v.bias"), E);
        l->bo = vec(&B, NAME("attn_output.bias"), E);
        l->ln_attn_w = vec(&B, NAME("attn_output_norm.weight"), E);
        l->ln_attn_b = vec(&B, NAME("attn_output_norm.bias"), E);
        l->w_up = mat(&B, NAME("ffn_up.weight"), E, F, 0);
        l->b_up = vec(&B, NAME("ffn_up.bias"), F);
        l->w_down = mat(&B, NAME("ffn_down.weight"), F, E, 0);
        l->b_down = vec(&B, NAME("ffn_down.bias"), E);
        l->ln_out_w = vec(&B, NAME("layer_output_norm.weight"), E);
        l->ln_out_b = vec(&B, NAME("layer_output_norm.bias"), E);
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

void kl_bert_free(struct kl_bert *b) {
    if (!b) return;
    free(b->layers);
    free(b);
}

/* ---------------------------------------------------------------- forward */

struct kl_bert_ws {
    kpool *pool;
    int cap_tok;
    float *x, *y;            /* [cap_tok][n_embd] residual stream, sublayer output */
    float *q, *k, *v, *att;  /* [cap_tok][n_embd] */
    float *up;               /* [cap_tok][n_ff] */
    float *scores;           /* per thread [cap_tok] attention weights */
    void *mm_scratch;
};

kl_bert_ws *kl_bert_ws_new(const kiln_model *m, int cap_tok, kpool *pool) {
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
        kl_bert_ws_free(w);
        return NULL;
    }
    return w;
}

void kl_bert_ws_free(kl_bert_ws *w) {
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
        kk_layernorm(x, x, nj->w, nj->b, E, j->m->bert->eps);
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

void kl_bert_forward(kl_bert_ws *w, const kiln_model *m, const int32_t *tokens, const int32_t *len, int n_seq,
                     int T, int pooling, float *out) {
    const kl_hparams *hp = &m->hp;
    const struct kl_bert *b = m->bert;
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
