/*
 * The bert family: the encoder architecture (general.architecture "bert", llama.cpp
 * tensor names and keys).  Per token row of n_embd:
 *
 *   x = LN(tok[id] + type[type] + pos[t])                    token_embd_norm
 *   per layer, post-norm:
 *     x = LN(x + O(attn(Qx + bq, Kx + bk, Vx + bv)) + bo)    attn_output_norm
 *     x = LN(x + down(gelu(up x + b_up)) + b_down)           layer_output_norm
 *
 * Attention is bidirectional over the tokens of the row's own sequence
 * (an unpadded batch, encoder.h).  GELU is the tanh approximation
 * ggml_gelu uses (kern_gelu).  LayerNorm epsilon comes from
 * bert.attention.layer_norm_epsilon.  type is the token type of the row
 * (0 unless the caller frames a pair: a reranker's document is type 1).
 *
 * A cross-encoder reranker carries a classification head, read from the
 * [CLS] row (rank pooling):
 *   score = cls.output(tanh(cls x + cls.b)) + cls.output.b
 * with cls optional (a single projection).  cls.output has one row per
 * score (bert.classifier.output_labels; the first is the relevance).
 */
#include "model/encoder.h"

#include "quant/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct model_bert_layer {
    kern_mat wq, wk, wv, wo;            /* n_embd -> n_embd */
    const float *bq, *bk, *bv, *bo;     /* [n_embd] */
    const float *ln_attn_w, *ln_attn_b; /* attn_output_norm [n_embd] */
    kern_mat w_up, w_down;              /* n_embd -> n_ff -> n_embd */
    const float *b_up, *b_down;         /* [n_ff], [n_embd] */
    const float *ln_out_w, *ln_out_b;   /* layer_output_norm [n_embd] */
} model_bert_layer;

struct model_bert {
    kern_mat pos_embd;  /* [n_pos rows of n_embd] */
    kern_mat type_embd; /* [n_types rows]; data NULL when absent */
    const float *emb_norm_w, *emb_norm_b;
    float eps; /* LayerNorm epsilon */
    int n_pos; /* longest input the positions allow */
    model_bert_layer *layers;
    /* classification head (rerankers): cls [n_embd -> n_embd] + tanh
     * (optional), cls.output [n_embd -> n_cls_out]; cls_out.data NULL when
     * the file has none */
    kern_mat cls, cls_out;
    const float *cls_b, *cls_out_b;
};

/* ---------------------------------------------------------------- binding */

static void bert_free_data(struct model_bert *b);

static kiln_status bert_bind(kiln_model *m) {
    model_hparams *hp = &m->hp;
    if (hp->n_head_kv != hp->n_head || hp->hd_k * hp->n_head != hp->n_embd) {
        return base_fail(KILN_ERR_FORMAT,
                         "bert needs n_head_kv == n_head and head size n_embd/n_head (got %d/%d heads, %d)",
                         hp->n_head_kv, hp->n_head, hp->hd_k);
    }
    if (hp->n_ff <= 0) { return base_fail(KILN_ERR_FORMAT, "bad or missing feed_forward_length (%d)", hp->n_ff); }
    struct model_bert *b = calloc(1, sizeof *b);
    if (b) b->layers = calloc((size_t)hp->n_layer, sizeof *b->layers);
    if (!b || !b->layers) {
        bert_free_data(b);
        return base_fail(KILN_ERR_NOMEM, "out of memory");
    }
    m->fam = b;
    b->eps = (float)gguf_get_float(m->gf, "bert.attention.layer_norm_epsilon", 1e-12);
    model_binder B = {m, KILN_OK};
    const int64_t E = hp->n_embd, F = hp->n_ff;
    m->tok_embd = model_bind_mat(&B, "token_embd.weight", E, -1, 0);
    hp->n_vocab = (int)m->tok_embd.nrows;
    b->type_embd = model_bind_mat(&B, "token_types.weight", E, -1, 1);
    b->pos_embd = model_bind_mat(&B, "position_embd.weight", E, -1, 0);
    b->n_pos = (int)b->pos_embd.nrows;
    b->emb_norm_w = model_bind_vec(&B, "token_embd_norm.weight", E, 0);
    b->emb_norm_b = model_bind_vec(&B, "token_embd_norm.bias", E, 0);
    for (int i = 0; i < hp->n_layer && !B.st; i++) {
        model_bert_layer *l = &b->layers[i];
        char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", i, s), n)
        l->wq = model_bind_mat(&B, NAME("attn_q.weight"), E, E, 0);
        l->wk = model_bind_mat(&B, NAME("attn_k.weight"), E, E, 0);
        l->wv = model_bind_mat(&B, NAME("attn_v.weight"), E, E, 0);
        l->wo = model_bind_mat(&B, NAME("attn_output.weight"), E, E, 0);
        l->bq = model_bind_vec(&B, NAME("attn_q.bias"), E, 0);
        l->bk = model_bind_vec(&B, NAME("attn_k.bias"), E, 0);
        l->bv = model_bind_vec(&B, NAME("attn_v.bias"), E, 0);
        l->bo = model_bind_vec(&B, NAME("attn_output.bias"), E, 0);
        l->ln_attn_w = model_bind_vec(&B, NAME("attn_output_norm.weight"), E, 0);
        l->ln_attn_b = model_bind_vec(&B, NAME("attn_output_norm.bias"), E, 0);
        l->w_up = model_bind_mat(&B, NAME("ffn_up.weight"), E, F, 0);
        l->b_up = model_bind_vec(&B, NAME("ffn_up.bias"), F, 0);
        l->w_down = model_bind_mat(&B, NAME("ffn_down.weight"), F, E, 0);
        l->b_down = model_bind_vec(&B, NAME("ffn_down.bias"), E, 0);
        l->ln_out_w = model_bind_vec(&B, NAME("layer_output_norm.weight"), E, 0);
        l->ln_out_b = model_bind_vec(&B, NAME("layer_output_norm.bias"), E, 0);
#undef NAME
    }
    b->cls_out = model_bind_mat(&B, "cls.output.weight", E, -1, 1);
    if (b->cls_out.data) {
        hp->n_cls_out = (int)b->cls_out.nrows;
        b->cls_out_b = model_bind_vec(&B, "cls.output.bias", hp->n_cls_out, 1);
        b->cls = model_bind_mat(&B, "cls.weight", E, E, 1);
        if (b->cls.data) b->cls_b = model_bind_vec(&B, "cls.bias", E, 1);
        const gguf_kv *labels = model_meta_kv(m, "classifier.output_labels");
        if (!B.st && labels && (labels->type != GGUF_ARRAY || (int64_t)labels->n != hp->n_cls_out))
            model_bind_fail(&B, "bert.classifier.output_labels has %lld entries but cls.output.weight %d rows",
                            labels->type == GGUF_ARRAY ? (long long)labels->n : -1LL, hp->n_cls_out);
    }
    if (B.st) return B.st;
    if (hp->n_vocab <= 0 || b->n_pos <= 0) { return base_fail(KILN_ERR_FORMAT, "bert embedding tables are empty"); }
    if (b->n_pos < hp->n_ctx_train) hp->n_ctx_train = b->n_pos;
    return 0;
}

static void bert_free_data(struct model_bert *b) {
    if (!b) return;
    free(b->layers);
    free(b);
}

static void bert_free(kiln_model *m) { bert_free_data(m->fam); }

/* ---------------------------------------------------------------- forward */

typedef struct model_bert_ws {
    thread_pool *pool;
    int cap_tok;
    float *x, *y;           /* [cap_tok][n_embd] residual stream, sublayer output */
    float *q, *k, *v, *att; /* [cap_tok][n_embd] */
    float *up;              /* [cap_tok][n_ff] */
    float *scratch;         /* attention scores, model_enc_attn_scratch */
    int32_t *off, *seq;     /* the batch layout (encoder.h) */
    float *pooled;          /* [cap_tok][n_embd] pooled rows (rank pooling) */
    void *mm_scratch;
} model_bert_ws;

static void bert_ws_free(void *ws);

static void *bert_ws_new(const kiln_model *m, int cap_tok, thread_pool *pool) {
    const size_t N = (size_t)cap_tok, E = (size_t)m->hp.n_embd, F = (size_t)m->hp.n_ff;
    model_bert_ws *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->pool = pool;
    w->cap_tok = cap_tok;
    float **bufs[] = {&w->x, &w->y, &w->q, &w->k, &w->v, &w->att};
    int ok = 1;
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) ok &= (*bufs[i] = malloc(N * E * 4)) != NULL;
    ok &= (w->up = malloc(N * F * 4)) != NULL;
    ok &= (w->scratch = malloc(model_enc_attn_scratch(pool, cap_tok) * 4)) != NULL;
    ok &= (w->off = malloc((N + 1) * sizeof *w->off)) != NULL;
    ok &= (w->seq = malloc(N * sizeof *w->seq)) != NULL;
    ok &= (w->pooled = m->hp.n_cls_out ? malloc(N * E * 4) : calloc(1, 1)) != NULL;
    ok &= (w->mm_scratch = malloc(kern_matmul_scratch_size((int64_t)(E > F ? E : F), cap_tok))) != NULL;
    if (!ok) {
        bert_ws_free(w);
        return NULL;
    }
    return w;
}

static void bert_ws_free(void *ws) {
    model_bert_ws *w = ws;
    if (!w) return;
    void *bufs[] = {w->x, w->y, w->q, w->k, w->v, w->att, w->up, w->scratch, w->off, w->seq, w->pooled, w->mm_scratch};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(w);
}

typedef struct fwd_job {
    model_bert_ws *w;
    const kiln_model *m;
    const model_bert_layer *L;
    int n_rows;
    /* residual_norm_task: x = LN(x + y + bias) with this norm */
    const float *bias, *nw, *nb;
} fwd_job;

static void residual_norm_task(void *ud, int ith, int nth) {
    fwd_job *j = ud;
    const int E = j->m->hp.n_embd;
    long lo, hi;
    thread_pool_range(j->n_rows, ith, nth, &lo, &hi);
    for (long r = lo; r < hi; r++) {
        float *x = j->w->x + (size_t)r * E;
        kern_add(x, j->w->y + (size_t)r * E, E);
        kern_add(x, j->bias, E);
        kern_layernorm(x, x, j->nw, j->nb, E, ((const struct model_bert *)j->m->fam)->eps);
    }
}

static void up_gelu_task(void *ud, int ith, int nth) {
    fwd_job *j = ud;
    const int F = j->m->hp.n_ff;
    long lo, hi;
    thread_pool_range(j->n_rows, ith, nth, &lo, &hi);
    for (long r = lo; r < hi; r++) {
        float *u = j->w->up + (size_t)r * F;
        kern_add(u, j->L->b_up, F);
        kern_gelu(u, F);
    }
}

/* The classification head of rank pooling on the [CLS] rows in pooled:
 * out = cls.output(tanh(cls x + b)) + b_out, or cls.output x + b_out
 * when the file has no cls (a single projection). */
static void bert_rank_head(model_bert_ws *w, const kiln_model *m, int n_seq, float *out) {
    const struct model_bert *b = m->fam;
    const int E = m->hp.n_embd, C = m->hp.n_cls_out;
    const float *h = w->pooled;
    if (b->cls.data) {
        kern_matmul(w->pool, &b->cls, w->pooled, n_seq, w->y, E, w->mm_scratch);
        for (int s = 0; s < n_seq; s++) {
            float *r = w->y + (size_t)s * E;
            if (b->cls_b) kern_add(r, b->cls_b, E);
            for (int d = 0; d < E; d++) r[d] = tanhf(r[d]);
        }
        h = w->y;
    }
    kern_matmul(w->pool, &b->cls_out, h, n_seq, out, C, w->mm_scratch);
    if (b->cls_out_b) kern_add_rows(out, b->cls_out_b, n_seq, C);
}

static void bert_encode(void *ws, const kiln_model *m, const int32_t *tokens, const uint8_t *types, const int32_t *len,
                        int n_seq, int pooling, float *out) {
    model_bert_ws *w = ws;
    const model_hparams *hp = &m->hp;
    const struct model_bert *b = m->fam;
    const int E = hp->n_embd;
    model_enc_batch bt;
    model_enc_batch_init(&bt, len, n_seq, w->off, w->seq);
    const int N = bt.n_rows;
    fwd_job j = {w, m, NULL, N, NULL, NULL, NULL};

    /* embeddings: token + type + position (within the sequence) */
    float *tmp = w->y;
    for (int r = 0; r < N; r++) {
        float *x = w->x + (size_t)r * E;
        const int t = r - bt.off[bt.seq[r]];
        kern_get_row(&m->tok_embd, tokens[r], x);
        kern_get_row(&b->pos_embd, t, tmp);
        kern_add(x, tmp, E);
        if (b->type_embd.data) {
            const int ty = types && types[r] < b->type_embd.nrows ? types[r] : 0;
            kern_get_row(&b->type_embd, ty, tmp);
            kern_add(x, tmp, E);
        }
        kern_layernorm(x, x, b->emb_norm_w, b->emb_norm_b, E, b->eps);
    }

    const int H = hp->n_head, hd = hp->hd_k;
    model_enc_attn at = {&bt, w->q, w->k, w->v, E, E, w->att, E, H, H, hd, -1, 1.0f / sqrtf((float)hd), w->scratch};
    for (int l = 0; l < hp->n_layer; l++) {
        const model_bert_layer *L = &b->layers[l];
        j.L = L;
        kern_mm_out qkv[3] = {{&L->wq, w->q, E}, {&L->wk, w->k, E}, {&L->wv, w->v, E}};
        kern_matmul_multi(w->pool, qkv, 3, w->x, N, w->mm_scratch);
        kern_add_rows(w->q, L->bq, N, E);
        kern_add_rows(w->k, L->bk, N, E);
        kern_add_rows(w->v, L->bv, N, E);
        model_enc_attention(w->pool, &at);
        kern_matmul(w->pool, &L->wo, w->att, N, w->y, E, w->mm_scratch);
        j.bias = L->bo, j.nw = L->ln_attn_w, j.nb = L->ln_attn_b;
        thread_pool_run(w->pool, residual_norm_task, &j);

        kern_matmul(w->pool, &L->w_up, w->x, N, w->up, hp->n_ff, w->mm_scratch);
        thread_pool_run(w->pool, up_gelu_task, &j);
        kern_matmul(w->pool, &L->w_down, w->up, N, w->y, E, w->mm_scratch);
        j.bias = L->b_down, j.nw = L->ln_out_w, j.nb = L->ln_out_b;
        thread_pool_run(w->pool, residual_norm_task, &j);
    }

    if (pooling == MODEL_POOL_RANK) {
        model_enc_pool(&bt, w->x, E, MODEL_POOL_CLS, w->pooled);
        bert_rank_head(w, m, n_seq, out);
    } else {
        model_enc_pool(&bt, w->x, E, pooling, out);
    }
}

static const model_arch k_archs[] = {
    {"bert", &model_family_bert, 1, 0}, /* BERT, bge, e5, MiniLM (absolute positions) */
};

const model_family model_family_bert = {
    .name = "bert",
    .archs = k_archs,
    .n_archs = sizeof k_archs / sizeof k_archs[0],
    .encoder = 1,
    .bind = bert_bind,
    .free = bert_free,
    .enc_new = bert_ws_new,
    .enc_free = bert_ws_free,
    .pair = MODEL_PAIR_BERT,
    .encode = bert_encode,
};
