/* The text-to-image pipeline: opening (schemas first), the stages and one
 * generation. */
#include "image/image.h"

#include "base/base.h"
#include "image/dit.h"
#include "image/spiece.h"
#include "image/t5.h"
#include "image/vae.h"
#include "kernels/ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IMAGE_SIZE 256

struct image_pipeline {
    image_config cfg;
    ckpt_file *fd, *ft, *fv;
    image_spiece *tok;
    image_t5 t5;
    image_dit dit;
    image_vae vae;
    thread_pool *pool;
};

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static uint8_t *read_all(const char *path, size_t *len, size_t max, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        base_errf(err, errlen, "%s: cannot open", path);
        return NULL;
    }
    uint8_t *buf = NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n < 0 || (size_t)n > max) {
        base_errf(err, errlen, "%s: %s", path, n < 0 ? "cannot read" : "too large for a tokenizer");
    } else if ((buf = malloc((size_t)n + 1)) && (rewind(f), fread(buf, 1, (size_t)n, f) == (size_t)n)) {
        *len = (size_t)n;
    } else {
        base_errf(err, errlen, "%s: cannot read", path);
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

void image_pipeline_free(image_pipeline *p) {
    if (!p) return;
    image_t5_free(&p->t5);
    image_dit_free(&p->dit);
    image_vae_free(&p->vae);
    image_spiece_free(p->tok);
    ckpt_close(p->fd);
    ckpt_close(p->ft);
    ckpt_close(p->fv);
    if (p->pool) thread_pool_free(p->pool);
    free(p);
}

/* Maps the three model files, reads the tokenizer and checks every schema
 * and that the parts fit, before any model memory: the first half of
 * opening, and all of checking. */
static int open_checked(image_pipeline *p, const image_files *files, const image_config *config, char *err,
                        size_t errlen) {
    /* headers only: the readers map the files and list their tensors */
    char sub[512];
    if (ckpt_open(files->dit, &p->fd) || ckpt_open(files->t5, &p->ft) || ckpt_open(files->vae, &p->fv)) {
        base_errf(err, errlen, "%s", kiln_last_error());
        return -1;
    }
    if (ckpt_format(p->fd) != CKPT_TORCH_ZIP) {
        base_errf(err, errlen, "%s: the DiT must be a PyTorch ZIP state dictionary", files->dit);
        return -1;
    }
    if (ckpt_format(p->ft) != CKPT_SAFETENSORS || ckpt_format(p->fv) != CKPT_SAFETENSORS) {
        base_errf(err, errlen, "%s: the text encoder and the VAE must be safetensors",
                  ckpt_format(p->ft) != CKPT_SAFETENSORS ? files->t5 : files->vae);
        return -1;
    }
    size_t tl = 0;
    uint8_t *tb = read_all(files->tokenizer, &tl, 64u << 20, err, errlen);
    if (!tb) return -1;
    p->tok = image_spiece_load(tb, tl, sub, sizeof sub);
    free(tb);
    if (!p->tok) {
        base_errf(err, errlen, "%s: %s", files->tokenizer, sub);
        return -1;
    }
    /* every schema before any model memory */
    image_t5 t5;
    image_dit dit;
    image_vae vae;
    const char *nd = base_name(files->dit), *nt = base_name(files->t5), *nv = base_name(files->vae);
    if (image_t5_bind(&t5, p->ft, nt, config->max_distance, 1, err, errlen) ||
        image_dit_bind(&dit, p->fd, nd, config->head_dim, config->interp, 1, err, errlen) ||
        image_vae_bind(&vae, p->fv, nv, config->vae_groups, config->vae_scaling, 1, err, errlen))
        return -1;
    if (dit.caption != t5.d_model) {
        base_errf(err, errlen, "%s takes %d-wide caption states but the text encoder %s gives %d", nd, dit.caption, nt,
                  t5.d_model);
        return -1;
    }
    if (dit.in_ch != vae.latent || (dit.out_ch != dit.in_ch && dit.out_ch != 2 * dit.in_ch)) {
        base_errf(err, errlen, "%s has %d latent channels in and %d out, the VAE %s %d", nd, dit.in_ch, dit.out_ch, nv,
                  vae.latent);
        return -1;
    }
    if (dit.sample * image_vae_factor(&vae) != IMAGE_SIZE) {
        base_errf(err, errlen, "%s with %s makes %d-pixel images; only %d x %d is supported", nd, nv,
                  dit.sample * image_vae_factor(&vae), IMAGE_SIZE, IMAGE_SIZE);
        return -1;
    }
    if (image_spiece_n_pieces(p->tok) > t5.n_vocab || image_spiece_eos(p->tok) < 0) {
        base_errf(err, errlen, "the tokenizer (%d pieces%s) does not fit the text encoder's %d embeddings",
                  image_spiece_n_pieces(p->tok), image_spiece_eos(p->tok) < 0 ? ", no EOS" : "", t5.n_vocab);
        return -1;
    }
    return 0;
}

int image_pipeline_check(const image_files *files, const image_config *config, char *err, size_t errlen) {
    image_pipeline *p = calloc(1, sizeof *p);
    if (!p) {
        base_errf(err, errlen, "out of memory");
        return -1;
    }
    const int rc = open_checked(p, files, config, err, errlen);
    image_pipeline_free(p);
    return rc;
}

int image_pipeline_open(const image_files *files, const image_config *config, int n_threads, image_pipeline **out,
                        char *err, size_t errlen) {
    *out = NULL;
    image_pipeline *p = calloc(1, sizeof *p);
    if (!p) {
        base_errf(err, errlen, "out of memory");
        return -1;
    }
    p->cfg = *config;
    const char *nd = base_name(files->dit), *nt = base_name(files->t5), *nv = base_name(files->vae);
    if (open_checked(p, files, config, err, errlen)) goto fail;
    if (image_t5_bind(&p->t5, p->ft, nt, config->max_distance, 0, err, errlen) ||
        image_dit_bind(&p->dit, p->fd, nd, config->head_dim, config->interp, 0, err, errlen) ||
        image_vae_bind(&p->vae, p->fv, nv, config->vae_groups, config->vae_scaling, 0, err, errlen))
        goto fail;
    if (!(p->pool = thread_pool_new(n_threads))) {
        base_errf(err, errlen, "cannot start threads");
        goto fail;
    }
    *out = p;
    return 0;
fail:
    image_pipeline_free(p);
    return -1;
}

const image_config *image_pipeline_config(const image_pipeline *p) { return &p->cfg; }
int image_pipeline_width(const image_pipeline *p) { return p->dit.sample * image_vae_factor(&p->vae); }
int image_pipeline_height(const image_pipeline *p) { return p->dit.sample * image_vae_factor(&p->vae); }
int image_encoder_width(const image_pipeline *p) { return p->t5.d_model; }
int image_dit_out_channels(const image_pipeline *p) { return p->dit.out_ch; }

int image_tokenize(const image_pipeline *p, const char *prompt, int32_t *ids, int cap) {
    int n = image_spiece_encode(p->tok, prompt, strlen(prompt), ids, cap > 0 ? cap - 1 : 0);
    if (n < 0) return -1;
    if (n + 1 <= cap) ids[n] = image_spiece_eos(p->tok);
    return n + 1;
}

int image_encode(image_pipeline *p, const int32_t *ids, int n, float *out, char *err, size_t errlen) {
    return image_t5_encode(&p->t5, p->pool, ids, n, out, err, errlen);
}

int image_dit_once(image_pipeline *p, const float *x, float t, const float *ctx, int n, float *out, char *err,
                   size_t errlen) {
    image_dit_work *w = image_dit_work_new(&p->dit, p->pool, 1, &ctx, &n);
    if (!w) {
        base_errf(err, errlen, "out of memory");
        return -1;
    }
    image_dit_forward(&p->dit, p->pool, w, x, &t, out);
    image_dit_work_free(w);
    return 0;
}

int image_decode(image_pipeline *p, const float *z, float *img, char *err, size_t errlen) {
    return image_vae_decode(&p->vae, p->pool, z, p->dit.sample, p->dit.sample, img, err, errlen);
}

void image_to_pixels(const float *img, int w, int h, uint8_t *rgb) {
    const size_t plane = (size_t)w * (size_t)h;
    for (size_t i = 0; i < plane; i++)
        for (int c = 0; c < 3; c++) {
            float v = img[(size_t)c * plane + i] / 2.0f + 0.5f;
            v = v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
            rgb[i * 3 + (size_t)c] = (uint8_t)nearbyintf(v * 255.0f);
        }
}

int image_generate(image_pipeline *p, const image_request *r, uint8_t **png, size_t *png_len, char *err,
                   size_t errlen) {
    *png = NULL;
    *png_len = 0;
    const image_config *c = &p->cfg;
    const int steps = r->steps > 0 ? r->steps : c->steps;
    const float cfg = r->cfg >= 0 ? r->cfg : c->cfg;
    const int guided = cfg > 1.0f;
    if (!r->prompt) {
        base_errf(err, errlen, "no prompt");
        return IMAGE_ERR;
    }
    const int S = p->dit.sample, lc = p->dit.in_ch, oc = p->dit.out_ch, W = image_pipeline_width(p);
    const size_t nz = (size_t)lc * (size_t)S * (size_t)S, D = (size_t)p->t5.d_model;
    int32_t *ids = malloc((size_t)c->max_tokens * sizeof *ids);
    float *ts = malloc((size_t)steps * sizeof *ts), *sig = malloc(((size_t)steps + 1) * sizeof *sig);
    float *ec = malloc((size_t)c->max_tokens * D * sizeof *ec), *eu = malloc(D * sizeof *eu);
    float *z = malloc(nz * sizeof *z), *x = malloc(2 * nz * sizeof *x), *o = malloc(2 * (size_t)oc * S * S * sizeof *o);
    float *img = malloc(3 * (size_t)W * (size_t)W * sizeof *img);
    uint8_t *rgb = malloc(3 * (size_t)W * (size_t)W);
    image_dit_work *w = NULL;
    int rc = IMAGE_ERR;
    if (!ids || !ts || !sig || !ec || !eu || !z || !x || !o || !img || !rgb) {
        base_errf(err, errlen, "out of memory");
        goto done;
    }
    float init;
    if (image_sched_plan(&c->sched, steps, ts, sig, &init, err, errlen)) goto done;
    int n = image_tokenize(p, r->prompt, ids, c->max_tokens);
    if (n < 0) {
        base_errf(err, errlen, "out of memory");
        goto done;
    }
    if (n > c->max_tokens) {
        base_errf(err, errlen, "the prompt is %d tokens; the text encoder takes at most %d (end token included)", n,
                  c->max_tokens);
        rc = IMAGE_TOO_LONG;
        goto done;
    }
    if (image_encode(p, ids, n, ec, err, errlen)) goto done;
    const int32_t eos = image_spiece_eos(p->tok);
    if (guided && image_encode(p, &eos, 1, eu, err, errlen)) goto done;
    /* batch item 0 is the unconditional pass, 1 the prompt's */
    const float *ctx[2] = {eu, ec};
    const int len[2] = {1, n};
    const int B = guided ? 2 : 1;
    w = image_dit_work_new(&p->dit, p->pool, B, guided ? ctx : ctx + 1, guided ? len : len + 1);
    if (!w) {
        base_errf(err, errlen, "out of memory");
        goto done;
    }
    image_rng g;
    image_rng_seed(&g, r->seed);
    image_rng_gauss(&g, z, nz);
    for (size_t i = 0; i < nz; i++) z[i] *= init;
    for (int s = 0; s < steps; s++) {
        if (r->progress && r->progress(r->user, s, steps)) {
            base_errf(err, errlen, "cancelled");
            rc = IMAGE_CANCELLED;
            goto done;
        }
        const float sg = sig[s], scale = sqrtf(sg * sg + 1.0f);
        for (size_t i = 0; i < nz; i++) x[i] = z[i] / scale;
        if (guided) memcpy(x + nz, x, nz * sizeof *x);
        const float tt[2] = {ts[s], ts[s]};
        image_dit_forward(&p->dit, p->pool, w, x, tt, o);
        /* the first lc output channels are the noise (a learned-sigma model
         * predicts lc more) */
        float *eps = guided ? o + (size_t)oc * S * S : o;
        if (guided)
            for (size_t i = 0; i < nz; i++) eps[i] = o[i] + cfg * (eps[i] - o[i]);
        image_euler_step(&c->sched, z, eps, sg, sig[s + 1], nz);
    }
    if (r->progress && r->progress(r->user, steps, steps)) {
        base_errf(err, errlen, "cancelled");
        rc = IMAGE_CANCELLED;
        goto done;
    }
    if (image_decode(p, z, img, err, errlen)) goto done;
    image_to_pixels(img, W, W, rgb);
    if (image_png_encode(rgb, W, W, png, png_len, err, errlen)) goto done;
    rc = IMAGE_OK;
done:
    image_dit_work_free(w);
    free(ids);
    free(ts);
    free(sig);
    free(ec);
    free(eu);
    free(z);
    free(x);
    free(o);
    free(img);
    free(rgb);
    return rc;
}
