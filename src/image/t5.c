#include "image/t5.h"

#include "base/base.h"
#include "kernels/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int image_t5_bind(image_t5 *m, const ckpt_file *f, const char *what, int max_distance, int check, char *err,
                  size_t errlen) {
    memset(m, 0, sizeof *m);
    image_binder b = {f, what, check, 0, err, errlen};
    const ckpt_tensor *emb = ckpt_find(f, "shared.weight");
    const char *emb_name = "shared.weight";
    if (!emb) {
        emb = ckpt_find(f, "encoder.embed_tokens.weight");
        emb_name = "encoder.embed_tokens.weight";
    }
    const ckpt_tensor *rb = ckpt_find(f, "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight");
    const ckpt_tensor *q0 = ckpt_find(f, "encoder.block.0.layer.0.SelfAttention.q.weight");
    const ckpt_tensor *wi = ckpt_find(f, "encoder.block.0.layer.1.DenseReluDense.wi_0.weight");
    if (!emb || !rb || !q0 || !wi || emb->n_dims != 2 || rb->n_dims != 2 || q0->n_dims != 2 || wi->n_dims != 2) {
        base_errf(err, errlen,
                  "%s: not a T5 encoder (needs shared.weight, encoder.block.0 attention with its relative "
                  "position bias, and a gated-GELU feed-forward wi_0/wi_1)",
                  what);
        return -1;
    }
    m->n_vocab = (int)emb->shape[0];
    m->d_model = (int)emb->shape[1];
    m->buckets = (int)rb->shape[0];
    m->heads = (int)rb->shape[1];
    m->d_ff = (int)wi->shape[0];
    m->max_distance = max_distance;
    if (m->heads < 1 || q0->shape[0] % m->heads || m->buckets < 4 || m->buckets % 2 || max_distance < m->buckets / 4) {
        base_errf(err, errlen, "%s: T5 sizes do not fit together (%d heads, %lld inner, %d buckets)", what, m->heads,
                  (long long)q0->shape[0], m->buckets);
        return -1;
    }
    m->d_kv = (int)(q0->shape[0] / m->heads);
    while (image_find(f, "encoder.block.%d.layer.0.layer_norm.weight", m->layers) && m->layers < 1000) m->layers++;
    if (!m->layers) {
        base_errf(err, errlen, "%s: no T5 encoder blocks", what);
        return -1;
    }
    const int64_t D = m->d_model, I = (int64_t)m->heads * m->d_kv, F = m->d_ff;
    image_mat(&b, &m->emb, 2, (int64_t[]){m->n_vocab, D}, "%s", emb_name);
    m->rel_bias = image_vec(&b, (int64_t)m->buckets * m->heads,
                            "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight");
    if (!check) {
        m->blk = calloc((size_t)m->layers, sizeof *m->blk);
        if (!m->blk) {
            base_errf(err, errlen, "out of memory");
            return -1;
        }
    }
    for (int i = 0; i < m->layers && !b.failed; i++) {
        image_t5_block tmp, *k = check ? &tmp : &m->blk[i];
        memset(&tmp, 0, sizeof tmp);
        const char *p = "encoder.block";
        k->ln0 = image_vec(&b, D, "%s.%d.layer.0.layer_norm.weight", p, i);
        image_lin_bind(&b, &k->q, I, D, 0, "%s.%d.layer.0.SelfAttention.q", p, i);
        image_lin_bind(&b, &k->k, I, D, 0, "%s.%d.layer.0.SelfAttention.k", p, i);
        image_lin_bind(&b, &k->v, I, D, 0, "%s.%d.layer.0.SelfAttention.v", p, i);
        image_lin_bind(&b, &k->o, D, I, 0, "%s.%d.layer.0.SelfAttention.o", p, i);
        k->ln1 = image_vec(&b, D, "%s.%d.layer.1.layer_norm.weight", p, i);
        image_lin_bind(&b, &k->wi0, F, D, 0, "%s.%d.layer.1.DenseReluDense.wi_0", p, i);
        image_lin_bind(&b, &k->wi1, F, D, 0, "%s.%d.layer.1.DenseReluDense.wi_1", p, i);
        image_lin_bind(&b, &k->wo, D, F, 0, "%s.%d.layer.1.DenseReluDense.wo", p, i);
    }
    m->final_ln = image_vec(&b, D, "encoder.final_layer_norm.weight");
    if (b.failed) {
        image_t5_free(m);
        return -1;
    }
    return 0;
}

void image_t5_free(image_t5 *m) {
    if (m->blk)
        for (int i = 0; i < m->layers; i++) {
            free(m->blk[i].ln0);
            free(m->blk[i].ln1);
        }
    free(m->blk);
    free(m->rel_bias);
    free(m->final_ln);
    m->blk = NULL;
    m->rel_bias = m->final_ln = NULL;
}

int image_t5_bucket(int rel, int buckets, int max_distance) {
    const int nb = buckets / 2, max_exact = nb / 2;
    int ret = rel > 0 ? nb : 0;
    const int n = rel < 0 ? -rel : rel;
    if (n < max_exact) return ret + n;
    const float a = logf((float)n / (float)max_exact);
    const float b = (float)log((double)max_distance / (double)max_exact);
    int large = max_exact + (int)(a / b * (float)(nb - max_exact));
    return ret + (large < nb - 1 ? large : nb - 1);
}

static void rmsnorm(float *out, const float *x, const float *w, int n_tok, int d) {
    for (int t = 0; t < n_tok; t++) kern_rmsnorm(out + (size_t)t * (size_t)d, x + (size_t)t * (size_t)d, w, d, 1e-6f);
}

int image_t5_encode(const image_t5 *m, thread_pool *pool, const int32_t *ids, int n, float *out, char *err,
                    size_t errlen) {
    const int D = m->d_model, I = m->heads * m->d_kv, F = m->d_ff, H = m->heads;
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= m->n_vocab) {
            base_errf(err, errlen, "token id %d is outside the encoder's vocabulary of %d", ids[i], m->n_vocab);
            return -1;
        }
    const size_t nn = (size_t)n;
    const int widest = D > F ? (D > I ? D : I) : (F > I ? F : I);
    float *x = malloc(nn * (size_t)D * sizeof *x), *q = malloc(nn * (size_t)I * sizeof *q),
          *k = malloc(nn * (size_t)I * sizeof *k), *v = malloc(nn * (size_t)I * sizeof *v),
          *a = malloc(nn * (size_t)I * sizeof *a), *g = malloc(nn * (size_t)F * sizeof *g),
          *u = malloc(nn * (size_t)F * sizeof *u), *y = malloc(nn * (size_t)widest * sizeof *y),
          *bias = malloc((size_t)H * nn * nn * sizeof *bias);
    void *mm = malloc(kern_matmul_scratch_size(widest, n));
    void *as = malloc(image_attention_scratch(n, n, m->d_kv));
    int rc = -1;
    if (!x || !q || !k || !v || !a || !g || !u || !y || !bias || !mm || !as) {
        base_errf(err, errlen, "out of memory");
        goto done;
    }
    float *h = out;
    for (int i = 0; i < n; i++) kern_get_row(&m->emb, ids[i], h + (size_t)i * (size_t)D);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            const int bk = image_t5_bucket(j - i, m->buckets, m->max_distance);
            for (int hh = 0; hh < H; hh++)
                bias[((size_t)hh * nn + (size_t)i) * nn + (size_t)j] = m->rel_bias[bk * H + hh];
        }
    for (int l = 0; l < m->layers; l++) {
        const image_t5_block *b = &m->blk[l];
        rmsnorm(x, h, b->ln0, n, D);
        kern_mm_out qkv[3] = {{&b->q.w, q, I}, {&b->k.w, k, I}, {&b->v.w, v, I}};
        kern_matmul_multi(pool, qkv, 3, x, n, mm);
        image_attn at = {q, k, v, I, I, I, n, n, H, m->d_kv, 1.0f, bias, a, I};
        image_attention(pool, &at, as);
        image_linear(pool, &b->o, a, n, y, mm);
        kern_add(h, y, n * D);
        rmsnorm(x, h, b->ln1, n, D);
        kern_mm_out gu[2] = {{&b->wi0.w, g, F}, {&b->wi1.w, u, F}};
        kern_matmul_multi(pool, gu, 2, x, n, mm);
        kern_gelu(g, n * F);
        for (size_t i = 0; i < nn * (size_t)F; i++) g[i] *= u[i];
        image_linear(pool, &b->wo, g, n, y, mm);
        kern_add(h, y, n * D);
    }
    rmsnorm(h, h, m->final_ln, n, D);
    rc = 0;
done:
    free(x);
    free(q);
    free(k);
    free(v);
    free(a);
    free(g);
    free(u);
    free(y);
    free(bias);
    free(mm);
    free(as);
    return rc;
}
