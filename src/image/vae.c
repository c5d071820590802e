#include "image/vae.h"

#include "base/base.h"
#include "kernels/ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int conv_bind(image_binder *b, image_conv *c, int cout, int cin, int k, const char *name) {
    c->cin = cin;
    c->cout = cout;
    c->k = k;
    image_mat(b, &c->w, 4, (int64_t[]){cout, cin, k, k}, "%s.weight", name);
    c->b = image_vec(b, cout, "%s.bias", name);
    return b->failed ? -1 : 0;
}

static int res_bind(image_binder *b, image_resnet *r, int cin, int cout, const char *name) {
    char n[200];
    memset(r, 0, sizeof *r);
    r->cin = cin;
    r->cout = cout;
    r->n1w = image_vec(b, cin, "%s.norm1.weight", name);
    r->n1b = image_vec(b, cin, "%s.norm1.bias", name);
    snprintf(n, sizeof n, "%s.conv1", name);
    conv_bind(b, &r->c1, cout, cin, 3, n);
    r->n2w = image_vec(b, cout, "%s.norm2.weight", name);
    r->n2b = image_vec(b, cout, "%s.norm2.bias", name);
    snprintf(n, sizeof n, "%s.conv2", name);
    conv_bind(b, &r->c2, cout, cout, 3, n);
    if (cin != cout) {
        snprintf(n, sizeof n, "%s.conv_shortcut", name);
        conv_bind(b, &r->sc, cout, cin, 1, n);
    }
    return b->failed ? -1 : 0;
}

static void res_free(image_resnet *r) {
    free(r->n1w);
    free(r->n1b);
    free(r->n2w);
    free(r->n2b);
    free(r->c1.b);
    free(r->c2.b);
    free(r->sc.b);
    memset(r, 0, sizeof *r);
}

int image_vae_bind(image_vae *m, const ckpt_file *f, const char *what, int groups, float scaling, int check, char *err,
                   size_t errlen) {
    memset(m, 0, sizeof *m);
    image_binder b = {f, what, check, 0, err, errlen};
    const ckpt_tensor *ci = ckpt_find(f, "decoder.conv_in.weight"), *co = ckpt_find(f, "decoder.conv_out.weight");
    if (!ci || !co || ci->n_dims != 4 || co->n_dims != 4) {
        base_errf(err, errlen, "%s: not an AutoencoderKL decoder (needs decoder.conv_in and decoder.conv_out)", what);
        return -1;
    }
    m->latent = (int)ci->shape[1];
    m->groups = groups;
    m->scaling = scaling;
    while (image_find(f, "decoder.up_blocks.%d.resnets.0.conv1.weight", m->n_blocks) &&
           m->n_blocks < IMAGE_VAE_MAX_BLOCKS)
        m->n_blocks++;
    while (image_find(f, "decoder.up_blocks.0.resnets.%d.conv1.weight", m->layers) && m->layers < 64) m->layers++;
    if (m->n_blocks < 1 || m->layers < 1) {
        base_errf(err, errlen, "%s: the decoder has no up blocks", what);
        return -1;
    }
    /* channels: up block i outputs ch[n_blocks - 1 - i] */
    for (int i = 0; i < m->n_blocks; i++) {
        const ckpt_tensor *t = image_find(f, "decoder.up_blocks.%d.resnets.0.conv1.weight", i);
        if (!t || t->n_dims != 4) {
            base_errf(err, errlen, "%s: up block %d has no 3x3 conv1", what, i);
            return -1;
        }
        m->ch[m->n_blocks - 1 - i] = (int)t->shape[0];
    }
    for (int i = 0; i < m->n_blocks; i++)
        if (m->ch[i] < 1 || m->ch[i] % groups) {
            base_errf(err, errlen, "%s: %d channels do not split into %d groups", what, m->ch[i], groups);
            return -1;
        }
    const int top = m->ch[m->n_blocks - 1];
    conv_bind(&b, &m->pq, m->latent, m->latent, 1, "post_quant_conv");
    conv_bind(&b, &m->conv_in, top, m->latent, 3, "decoder.conv_in");
    res_bind(&b, &m->mid0, top, top, "decoder.mid_block.resnets.0");
    m->an_w = image_vec(&b, top, "decoder.mid_block.attentions.0.group_norm.weight");
    m->an_b = image_vec(&b, top, "decoder.mid_block.attentions.0.group_norm.bias");
    image_lin_bind(&b, &m->aq, top, top, 1, "decoder.mid_block.attentions.0.to_q");
    image_lin_bind(&b, &m->ak, top, top, 1, "decoder.mid_block.attentions.0.to_k");
    image_lin_bind(&b, &m->av, top, top, 1, "decoder.mid_block.attentions.0.to_v");
    image_lin_bind(&b, &m->ao, top, top, 1, "decoder.mid_block.attentions.0.to_out.0");
    res_bind(&b, &m->mid1, top, top, "decoder.mid_block.resnets.1");
    if (!check && !b.failed && !(m->res = calloc((size_t)m->n_blocks * (size_t)m->layers, sizeof *m->res))) {
        base_errf(err, errlen, "out of memory");
        b.failed = 1;
    }
    int prev = top;
    char name[128];
    for (int i = 0; i < m->n_blocks && !b.failed; i++) {
        const int out = m->ch[m->n_blocks - 1 - i];
        for (int j = 0; j < m->layers; j++) {
            image_resnet tmp, *r = check ? &tmp : &m->res[i * m->layers + j];
            snprintf(name, sizeof name, "decoder.up_blocks.%d.resnets.%d", i, j);
            res_bind(&b, r, j ? out : prev, out, name);
        }
        prev = out;
        if (i < m->n_blocks - 1) {
            snprintf(name, sizeof name, "decoder.up_blocks.%d.upsamplers.0.conv", i);
            conv_bind(&b, &m->up[i], out, out, 3, name);
        } else if (image_find(f, "decoder.up_blocks.%d.upsamplers.0.conv.weight", i) && !b.failed) {
            base_errf(err, errlen, "%s: the last up block upsamples", what);
            b.failed = 1;
        }
    }
    m->no_w = image_vec(&b, m->ch[0], "decoder.conv_norm_out.weight");
    m->no_b = image_vec(&b, m->ch[0], "decoder.conv_norm_out.bias");
    conv_bind(&b, &m->conv_out, 3, m->ch[0], 3, "decoder.conv_out");
    if (b.failed) {
        image_vae_free(m);
        return -1;
    }
    return 0;
}

void image_vae_free(image_vae *m) {
    free(m->pq.b);
    free(m->conv_in.b);
    free(m->conv_out.b);
    res_free(&m->mid0);
    res_free(&m->mid1);
    free(m->an_w);
    free(m->an_b);
    free(m->aq.b);
    free(m->ak.b);
    free(m->av.b);
    free(m->ao.b);
    if (m->res)
        for (int i = 0; i < m->n_blocks * m->layers; i++) res_free(&m->res[i]);
    free(m->res);
    for (int i = 0; i < IMAGE_VAE_MAX_BLOCKS; i++) free(m->up[i].b);
    free(m->no_w);
    free(m->no_b);
    memset(m, 0, sizeof *m);
}

/* Buffers of one decode: three images of the largest c x h x w, the conv
 * scratch, and the attention's. */
typedef struct vae_run {
    thread_pool *pool;
    int groups;
    void *scratch;
} vae_run;

static void conv(vae_run *r, const image_conv *c, const float *x, int h, int w, float *y) {
    const kern_conv k = {&c->w, c->b, c->cin, h, w, c->k, c->k, 1, c->k / 2};
    kern_conv2d(r->pool, &k, x, y, r->scratch);
}

static size_t conv_scratch(const image_conv *c, int h, int w) {
    const kern_conv k = {&c->w, c->b, c->cin, h, w, c->k, c->k, 1, c->k / 2};
    return kern_conv2d_scratch(&k);
}

static void gn(vae_run *r, int c, int hw, const float *w, const float *b, int silu, const float *x, float *y) {
    const kern_gn g = {c, hw, r->groups, 1e-6f, silu, w, b};
    kern_groupnorm(r->pool, &g, x, y);
}

/* x (in place) = resnet(x); t1, t2 are scratch images. */
static void resnet(vae_run *r, const image_resnet *rs, float *x, int h, int w, float *t1, float *t2) {
    const int hw = h * w;
    gn(r, rs->cin, hw, rs->n1w, rs->n1b, 1, x, t1);
    conv(r, &rs->c1, t1, h, w, t2);
    gn(r, rs->cout, hw, rs->n2w, rs->n2b, 1, t2, t2);
    conv(r, &rs->c2, t2, h, w, t1);
    if (rs->sc.cout) {
        conv(r, &rs->sc, x, h, w, t2);
        memcpy(x, t2, (size_t)rs->cout * (size_t)hw * sizeof *x);
    }
    kern_add(x, t1, rs->cout * hw);
}

int image_vae_decode(const image_vae *m, thread_pool *pool, const float *z, int h, int w, float *img, char *err,
                     size_t errlen) {
    const int top = m->ch[m->n_blocks - 1];
    size_t big = (size_t)m->latent * (size_t)h * (size_t)w, cs = 0;
    /* the largest image and conv scratch over every stage */
    int hh = h, ww = w;
    cs = conv_scratch(&m->conv_in, h, w);
    for (int i = 0; i < m->n_blocks; i++) {
        const int out = m->ch[m->n_blocks - 1 - i], in = i ? m->ch[m->n_blocks - i] : top;
        const size_t px = (size_t)hh * (size_t)ww, nx = i < m->n_blocks - 1 ? 4 * px : px;
        const size_t s1 = (size_t)(in > out ? in : out) * nx;
        if (s1 > big) big = s1;
        for (int j = 0; j < m->layers; j++) {
            const image_resnet *rs = &m->res[i * m->layers + j];
            size_t s = conv_scratch(&rs->c1, hh, ww);
            if (s > cs) cs = s;
            s = conv_scratch(&rs->c2, hh, ww);
            if (s > cs) cs = s;
            if (rs->sc.cout && (s = conv_scratch(&rs->sc, hh, ww)) > cs) cs = s;
        }
        if (i < m->n_blocks - 1) {
            hh *= 2;
            ww *= 2;
            size_t s = conv_scratch(&m->up[i], hh, ww);
            if (s > cs) cs = s;
        }
    }
    size_t s = conv_scratch(&m->mid0.c1, h, w);
    if (s > cs) cs = s;
    s = conv_scratch(&m->conv_out, hh, ww);
    if (s > cs) cs = s;
    const size_t n_px = (size_t)h * (size_t)w;
    const size_t as = image_attention_scratch((int)n_px, (int)n_px, top) + kern_matmul_scratch_size(top, (int)n_px);
    if (as > cs) cs = as;
    if ((size_t)5 * top * n_px > big) big = (size_t)5 * top * n_px; /* attention: x, q, k, v, out as [px][c] */
    float *a = malloc(big * sizeof *a), *t1 = malloc(big * sizeof *t1), *t2 = malloc(big * sizeof *t2);
    void *scratch = malloc(cs);
    if (!a || !t1 || !t2 || !scratch) {
        free(a);
        free(t1);
        free(t2);
        free(scratch);
        base_errf(err, errlen, "out of memory for the VAE decode (%zu MiB)", (3 * big * 4 + cs) >> 20);
        return -1;
    }
    vae_run r = {pool, m->groups, scratch};
    for (size_t i = 0; i < (size_t)m->latent * n_px; i++) t1[i] = z[i] / m->scaling;
    conv(&r, &m->pq, t1, h, w, t2);
    conv(&r, &m->conv_in, t2, h, w, a);
    resnet(&r, &m->mid0, a, h, w, t1, t2);
    /* mid attention over the h * w pixels, one head of top channels */
    {
        const int P = (int)n_px;
        gn(&r, top, P, m->an_w, m->an_b, 0, a, t1);
        float *xt = t2, *q = t2 + (size_t)top * n_px, *k = q + (size_t)top * n_px, *v = k + (size_t)top * n_px,
              *o = v + (size_t)top * n_px;
        for (int c = 0; c < top; c++)
            for (int p = 0; p < P; p++) xt[(size_t)p * top + c] = t1[(size_t)c * n_px + p];
        image_linear(pool, &m->aq, xt, P, q, scratch);
        image_linear(pool, &m->ak, xt, P, k, scratch);
        image_linear(pool, &m->av, xt, P, v, scratch);
        image_attn at = {q, k, v, top, top, top, P, P, 1, top, 1.0f / sqrtf((float)top), NULL, o, top};
        image_attention(pool, &at, scratch);
        image_linear(pool, &m->ao, o, P, q, scratch);
        for (int c = 0; c < top; c++)
            for (int p = 0; p < P; p++) a[(size_t)c * n_px + p] += q[(size_t)p * top + c];
    }
    resnet(&r, &m->mid1, a, h, w, t1, t2);
    hh = h;
    ww = w;
    for (int i = 0; i < m->n_blocks; i++) {
        for (int j = 0; j < m->layers; j++) resnet(&r, &m->res[i * m->layers + j], a, hh, ww, t1, t2);
        if (i < m->n_blocks - 1) {
            const int c = m->ch[m->n_blocks - 1 - i];
            kern_upsample2x(a, t1, c, hh, ww);
            hh *= 2;
            ww *= 2;
            conv(&r, &m->up[i], t1, hh, ww, a);
        }
    }
    gn(&r, m->ch[0], hh * ww, m->no_w, m->no_b, 1, a, t1);
    conv(&r, &m->conv_out, t1, hh, ww, img);
    free(a);
    free(t1);
    free(t2);
    free(scratch);
    return 0;
}
