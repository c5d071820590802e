#include "image/dit.h"

#include "base/base.h"
#include "kernels/conv.h"
#include "kernels/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define T_DIM 256 /* sinusoids of the timestep embedding */
#define MAX_HIDDEN 4096

/* diffusers' 1-D sin-cos table of dim values for position pos. */
static void sincos_row(float *out, int dim, double pos) {
    const int half = dim / 2;
    for (int i = 0; i < half; i++) {
        const double omega = 1.0 / pow(10000.0, (double)i / (dim / 2.0));
        out[i] = (float)sin(pos * omega);
        out[half + i] = (float)cos(pos * omega);
    }
}

int image_dit_bind(image_dit *m, const ckpt_file *f, const char *what, int head_dim, float interp, int check, char *err,
                   size_t errlen) {
    memset(m, 0, sizeof *m);
    image_binder b = {f, what, check, 0, err, errlen};
    const ckpt_tensor *pe = ckpt_find(f, "pos_embed.proj.weight"),
                      *c1 = ckpt_find(f, "caption_projection.linear_1.weight"),
                      *ff = ckpt_find(f, "transformer_blocks.0.ff.net.0.proj.weight"),
                      *po = ckpt_find(f, "proj_out.weight");
    if (!pe || !c1 || !ff || !po || pe->n_dims != 4 || c1->n_dims != 2 || ff->n_dims != 2 || po->n_dims != 2 ||
        pe->shape[2] != pe->shape[3]) {
        base_errf(err, errlen,
                  "%s: not a PixArt-alpha transformer (needs pos_embed.proj, caption_projection, "
                  "transformer_blocks.0 and proj_out)",
                  what);
        return -1;
    }
    if (ckpt_find(f, "adaln_single.emb.resolution_embedder.linear_1.weight")) {
        base_errf(err, errlen,
                  "%s: a transformer with micro-conditions (resolution and aspect embedders) is not "
                  "supported",
                  what);
        return -1;
    }
    m->hidden = (int)pe->shape[0];
    m->in_ch = (int)pe->shape[1];
    m->patch = (int)pe->shape[2];
    m->caption = (int)c1->shape[1];
    m->ff = (int)ff->shape[0];
    m->interp = interp;
    m->hd = head_dim;
    if (m->hidden > MAX_HIDDEN) {
        base_errf(err, errlen, "%s: hidden size %d is larger than %d", what, m->hidden, MAX_HIDDEN);
        return -1;
    }
    if (head_dim < 1 || m->hidden % head_dim || po->shape[0] % ((int64_t)m->patch * m->patch)) {
        base_errf(err, errlen, "%s: hidden size %d is not a multiple of the head size %d", what, m->hidden, head_dim);
        return -1;
    }
    m->heads = m->hidden / head_dim;
    m->out_ch = (int)(po->shape[0] / ((int64_t)m->patch * m->patch));
    m->sample = 32; /* 256 x 256 images through the VAE's factor of 8 */
    m->grid = m->sample / m->patch;
    m->n_tok = m->grid * m->grid;
    while (image_find(f, "transformer_blocks.%d.scale_shift_table", m->depth) && m->depth < 1000) m->depth++;
    const int64_t D = m->hidden;
    image_mat(&b, &m->patch_w.w, 4, (int64_t[]){D, m->in_ch, m->patch, m->patch}, "pos_embed.proj.weight");
    m->patch_w.b = image_vec(&b, D, "pos_embed.proj.bias");
    image_lin_bind(&b, &m->t1, D, T_DIM, 1, "adaln_single.emb.timestep_embedder.linear_1");
    image_lin_bind(&b, &m->t2, D, D, 1, "adaln_single.emb.timestep_embedder.linear_2");
    image_lin_bind(&b, &m->ada, 6 * D, D, 1, "adaln_single.linear");
    image_lin_bind(&b, &m->c1, D, m->caption, 1, "caption_projection.linear_1");
    image_lin_bind(&b, &m->c2, D, D, 1, "caption_projection.linear_2");
    if (!m->depth && !b.failed) {
        base_errf(err, errlen, "%s: no transformer blocks", what);
        b.failed = 1;
    }
    if (!check && !b.failed && !(m->blk = calloc((size_t)m->depth, sizeof *m->blk))) {
        base_errf(err, errlen, "out of memory");
        b.failed = 1;
    }
    for (int i = 0; i < m->depth && !b.failed; i++) {
        image_dit_block tmp, *k = check ? &tmp : &m->blk[i];
        memset(&tmp, 0, sizeof tmp);
        const char *p = "transformer_blocks";
        k->sst = image_vec(&b, 6 * D, "%s.%d.scale_shift_table", p, i);
        image_lin_bind(&b, &k->q1, D, D, 1, "%s.%d.attn1.to_q", p, i);
        image_lin_bind(&b, &k->k1, D, D, 1, "%s.%d.attn1.to_k", p, i);
        image_lin_bind(&b, &k->v1, D, D, 1, "%s.%d.attn1.to_v", p, i);
        image_lin_bind(&b, &k->o1, D, D, 1, "%s.%d.attn1.to_out.0", p, i);
        image_lin_bind(&b, &k->q2, D, D, 1, "%s.%d.attn2.to_q", p, i);
        image_lin_bind(&b, &k->k2, D, D, 1, "%s.%d.attn2.to_k", p, i);
        image_lin_bind(&b, &k->v2, D, D, 1, "%s.%d.attn2.to_v", p, i);
        image_lin_bind(&b, &k->o2, D, D, 1, "%s.%d.attn2.to_out.0", p, i);
        image_lin_bind(&b, &k->ff1, m->ff, D, 1, "%s.%d.ff.net.0.proj", p, i);
        image_lin_bind(&b, &k->ff2, D, m->ff, 1, "%s.%d.ff.net.2", p, i);
    }
    m->sst_out = image_vec(&b, 2 * D, "scale_shift_table");
    image_lin_bind(&b, &m->proj, (int64_t)m->patch * m->patch * m->out_ch, D, 1, "proj_out");
    if (!b.failed && !check) {
        m->pos = malloc((size_t)m->n_tok * (size_t)D * sizeof *m->pos);
        if (!m->pos) {
            base_errf(err, errlen, "out of memory");
            b.failed = 1;
        } else {
            const double step = 1.0 / ((double)m->grid / (double)(m->sample / m->patch)) / (double)interp;
            for (int gy = 0; gy < m->grid; gy++)
                for (int gx = 0; gx < m->grid; gx++) {
                    float *row = m->pos + ((size_t)gy * (size_t)m->grid + (size_t)gx) * (size_t)D;
                    sincos_row(row, (int)D / 2, (double)(float)(gx * step));
                    sincos_row(row + D / 2, (int)D / 2, (double)(float)(gy * step));
                }
        }
    }
    if (b.failed) {
        image_dit_free(m);
        return -1;
    }
    return 0;
}

static void lin_free(image_lin *l) {
    free(l->b);
    l->b = NULL;
}

void image_dit_free(image_dit *m) {
    lin_free(&m->patch_w);
    lin_free(&m->t1);
    lin_free(&m->t2);
    lin_free(&m->ada);
    lin_free(&m->c1);
    lin_free(&m->c2);
    lin_free(&m->proj);
    if (m->blk)
        for (int i = 0; i < m->depth; i++) {
            image_dit_block *k = &m->blk[i];
            free(k->sst);
            image_lin *ls[] = {&k->q1, &k->k1, &k->v1, &k->o1, &k->q2, &k->k2, &k->v2, &k->o2, &k->ff1, &k->ff2};
            for (size_t j = 0; j < sizeof ls / sizeof ls[0]; j++) lin_free(ls[j]);
        }
    free(m->blk);
    free(m->sst_out);
    free(m->pos);
    m->blk = NULL;
    m->sst_out = m->pos = NULL;
}

struct image_dit_work {
    int b, max_len;
    int *len;
    float **ck, **cv; /* [depth * b] cross-attention keys and values, [len][hidden] */
    float *patches, *h, *n, *q, *k, *v, *a, *y, *f, *o;
    float *temb, *te, *t6, *tmp;
    void *mm, *as;
};

void image_dit_work_free(image_dit_work *w) {
    if (!w) return;
    if (w->ck)
        for (int i = 0; w->ck[i]; i++) { /* NULL-terminated */
            free(w->ck[i]);
            free(w->cv[i]);
        }
    free(w->ck);
    free(w->cv);
    free(w->len);
    void *bufs[] = {w->patches, w->h, w->n,    w->q,  w->k,  w->v,   w->a,  w->y,
                    w->f,       w->o, w->temb, w->te, w->t6, w->tmp, w->mm, w->as};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(w);
}

image_dit_work *image_dit_work_new(const image_dit *m, thread_pool *pool, int b, const float *const *ctx,
                                   const int *ctx_len) {
    image_dit_work *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->b = b;
    const size_t D = (size_t)m->hidden, BN = (size_t)b * (size_t)m->n_tok;
    const size_t P = (size_t)m->in_ch * (size_t)m->patch * (size_t)m->patch;
    const size_t PO = (size_t)m->patch * (size_t)m->patch * (size_t)m->out_ch;
    w->len = malloc((size_t)b * sizeof *w->len);
    w->ck = calloc((size_t)m->depth * (size_t)b + 1, sizeof *w->ck);
    w->cv = calloc((size_t)m->depth * (size_t)b + 1, sizeof *w->cv);
    for (int i = 0; i < b && w->len; i++) {
        w->len[i] = ctx_len[i];
        if (ctx_len[i] > w->max_len) w->max_len = ctx_len[i];
    }
    size_t widest = D > (size_t)m->ff ? D : (size_t)m->ff;
    if (P > widest) widest = P;
    if ((size_t)m->caption > widest) widest = (size_t)m->caption;
    if (T_DIM > widest) widest = T_DIM;
    const int rows = (int)(BN > (size_t)w->max_len ? BN : (size_t)w->max_len);
    w->patches = malloc(BN * P * sizeof(float));
    w->h = malloc(BN * D * sizeof(float));
    w->n = malloc(BN * D * sizeof(float));
    w->q = malloc(BN * D * sizeof(float));
    w->k = malloc(BN * D * sizeof(float));
    w->v = malloc(BN * D * sizeof(float));
    w->a = malloc(BN * D * sizeof(float));
    w->y = malloc(BN * D * sizeof(float));
    w->f = malloc(BN * (size_t)m->ff * sizeof(float));
    w->o = malloc(BN * PO * sizeof(float));
    w->temb = malloc((size_t)b * T_DIM * sizeof(float));
    w->te = malloc((size_t)b * D * sizeof(float));
    w->t6 = malloc((size_t)b * 6 * D * sizeof(float));
    w->tmp = malloc((size_t)w->max_len * D * 2 * sizeof(float) + (size_t)b * D * sizeof(float));
    w->mm = malloc(kern_matmul_scratch_size((int64_t)widest, rows));
    const int kv = w->max_len > m->n_tok ? w->max_len : m->n_tok;
    w->as = malloc(image_attention_scratch(m->n_tok, kv, m->hd));
    if (!w->len || !w->ck || !w->cv || !w->patches || !w->h || !w->n || !w->q || !w->k || !w->v || !w->a || !w->y ||
        !w->f || !w->o || !w->temb || !w->te || !w->t6 || !w->tmp || !w->mm || !w->as) {
        image_dit_work_free(w);
        return NULL;
    }
    /* caption projection, then each block's cross-attention K and V */
    for (int i = 0; i < b; i++) {
        const int L = ctx_len[i];
        float *c = w->tmp, *c2 = w->tmp + (size_t)L * D;
        image_linear(pool, &m->c1, ctx[i], L, c, w->mm);
        kern_gelu_tanh(pool, c, (size_t)L * D);
        image_linear(pool, &m->c2, c, L, c2, w->mm);
        for (int l = 0; l < m->depth; l++) {
            const size_t s = (size_t)l * (size_t)b + (size_t)i;
            w->ck[s] = malloc((size_t)L * D * sizeof(float));
            w->cv[s] = malloc((size_t)L * D * sizeof(float));
            if (!w->ck[s] || !w->cv[s]) {
                image_dit_work_free(w);
                return NULL;
            }
            image_linear(pool, &m->blk[l].k2, c2, L, w->ck[s], w->mm);
            image_linear(pool, &m->blk[l].v2, c2, L, w->cv[s], w->mm);
        }
    }
    return w;
}

void image_dit_forward(const image_dit *m, thread_pool *pool, image_dit_work *w, const float *x, const float *t,
                       float *out) {
    const int B = w->b, N = m->n_tok, D = m->hidden, p = m->patch, S = m->sample, G = m->grid, oc = m->out_ch;
    const int BN = B * N;
    const size_t P = (size_t)m->in_ch * (size_t)p * (size_t)p, PO = (size_t)p * (size_t)p * (size_t)oc;
    /* patches (ci, ky, kx) of token (gy, gx) */
    for (int b = 0; b < B; b++)
        for (int gy = 0; gy < G; gy++)
            for (int gx = 0; gx < G; gx++) {
                float *row = w->patches + ((size_t)b * (size_t)N + (size_t)gy * (size_t)G + (size_t)gx) * P;
                for (int ci = 0; ci < m->in_ch; ci++)
                    for (int ky = 0; ky < p; ky++)
                        for (int kx = 0; kx < p; kx++)
                            *row++ =
                                x[(((size_t)b * (size_t)m->in_ch + (size_t)ci) * (size_t)S + (size_t)(gy * p + ky)) *
                                      (size_t)S +
                                  (size_t)(gx * p + kx)];
            }
    image_linear(pool, &m->patch_w, w->patches, BN, w->h, w->mm);
    for (int b = 0; b < B; b++) kern_add(w->h + (size_t)b * (size_t)N * (size_t)D, m->pos, N * D);
    /* timestep embedding: 128 cosines then 128 sines of t * 10000^(-j/128) */
    for (int b = 0; b < B; b++)
        for (int j = 0; j < T_DIM / 2; j++) {
            const float freq = expf(-logf(10000.0f) * (float)j / (float)(T_DIM / 2));
            const float e = t[b] * freq;
            w->temb[b * T_DIM + j] = cosf(e);
            w->temb[b * T_DIM + T_DIM / 2 + j] = sinf(e);
        }
    float *t1 = w->tmp;
    image_linear(pool, &m->t1, w->temb, B, t1, w->mm);
    image_silu(t1, B * D);
    image_linear(pool, &m->t2, t1, B, w->te, w->mm);
    memcpy(t1, w->te, (size_t)B * (size_t)D * sizeof *t1);
    image_silu(t1, B * D);
    image_linear(pool, &m->ada, t1, B, w->t6, w->mm);
    float md[6 * MAX_HIDDEN]; /* one item's shift, scale and gate vectors */
    for (int l = 0; l < m->depth; l++) {
        const image_dit_block *k = &m->blk[l];
        /* attention on the modulated norm: shift 0, scale 1, gate 2 */
        for (int b = 0; b < B; b++) {
            const float *t6 = w->t6 + (size_t)b * 6 * (size_t)D;
            for (int j = 0; j < 6 * D; j++) md[j] = k->sst[j] + t6[j];
            image_modulate(w->n + (size_t)b * N * D, w->h + (size_t)b * N * D, N, D, md, md + D);
        }
        image_linear(pool, &k->q1, w->n, BN, w->q, w->mm);
        image_linear(pool, &k->k1, w->n, BN, w->k, w->mm);
        image_linear(pool, &k->v1, w->n, BN, w->v, w->mm);
        for (int b = 0; b < B; b++) {
            const size_t o = (size_t)b * N * D;
            image_attn at = {w->q + o, w->k + o, w->v + o, D, D, D, N, N, m->heads, m->hd, 1.0f / sqrtf((float)m->hd),
                             NULL,     w->a + o, D};
            image_attention(pool, &at, w->as);
        }
        image_linear(pool, &k->o1, w->a, BN, w->y, w->mm);
        for (int b = 0; b < B; b++) {
            const float *t6 = w->t6 + (size_t)b * 6 * D;
            for (int i = 0; i < N; i++) {
                float *h = w->h + ((size_t)b * N + i) * D, *y = w->y + ((size_t)b * N + i) * D;
                for (int j = 0; j < D; j++) h[j] += (k->sst[2 * D + j] + t6[2 * D + j]) * y[j];
            }
        }
        /* cross-attention to the caption, straight from h */
        image_linear(pool, &k->q2, w->h, BN, w->q, w->mm);
        for (int b = 0; b < B; b++) {
            const size_t o = (size_t)b * N * D, s = (size_t)l * (size_t)B + (size_t)b;
            image_attn at = {
                w->q + o, w->ck[s], w->cv[s], D, D, D, N, w->len[b], m->heads, m->hd, 1.0f / sqrtf((float)m->hd),
                NULL,     w->a + o, D};
            image_attention(pool, &at, w->as);
        }
        image_linear(pool, &k->o2, w->a, BN, w->y, w->mm);
        kern_add(w->h, w->y, BN * D);
        /* MLP on the modulated norm: shift 3, scale 4, gate 5 */
        for (int b = 0; b < B; b++) {
            const float *t6 = w->t6 + (size_t)b * 6 * D;
            for (int j = 0; j < 6 * D; j++) md[j] = k->sst[j] + t6[j];
            image_modulate(w->n + (size_t)b * N * D, w->h + (size_t)b * N * D, N, D, md + 3 * D, md + 4 * D);
        }
        image_linear(pool, &k->ff1, w->n, BN, w->f, w->mm);
        kern_gelu_tanh(pool, w->f, (size_t)BN * (size_t)m->ff);
        image_linear(pool, &k->ff2, w->f, BN, w->y, w->mm);
        for (int b = 0; b < B; b++) {
            const float *t6 = w->t6 + (size_t)b * 6 * D;
            for (int i = 0; i < N; i++) {
                float *h = w->h + ((size_t)b * N + i) * D, *y = w->y + ((size_t)b * N + i) * D;
                for (int j = 0; j < D; j++) h[j] += (k->sst[5 * D + j] + t6[5 * D + j]) * y[j];
            }
        }
    }
    /* final norm: shift = table[0] + te, scale = table[1] + te */
    for (int b = 0; b < B; b++) {
        const float *te = w->te + (size_t)b * D;
        for (int j = 0; j < D; j++) {
            md[j] = m->sst_out[j] + te[j];
            md[D + j] = m->sst_out[D + j] + te[j];
        }
        image_modulate(w->n + (size_t)b * N * D, w->h + (size_t)b * N * D, N, D, md, md + D);
    }
    image_linear(pool, &m->proj, w->n, BN, w->o, w->mm);
    /* unpatchify: token (gy, gx), element (py, px, c) -> out[c][gy p + py][gx p + px] */
    for (int b = 0; b < B; b++)
        for (int gy = 0; gy < G; gy++)
            for (int gx = 0; gx < G; gx++) {
                const float *row = w->o + ((size_t)b * N + (size_t)gy * G + (size_t)gx) * PO;
                for (int py = 0; py < p; py++)
                    for (int px = 0; px < p; px++)
                        for (int c = 0; c < oc; c++)
                            out[(((size_t)b * oc + c) * S + (size_t)(gy * p + py)) * S + (size_t)(gx * p + px)] =
                                row[((size_t)py * p + px) * oc + c];
            }
}
