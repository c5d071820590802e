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

/* *out (malloc'd) receives the file's bytes, at most max of them. */
static kiln_status read_all(const char *path, size_t *len, size_t max, uint8_t **out) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return base_fail(KILN_ERR_FORMAT, "%s: cannot open", path);
    kiln_status st = KILN_OK;
    uint8_t *buf = NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n < 0 || (size_t)n > max)
        st = base_fail(KILN_ERR_FORMAT, "%s: %s", path, n < 0 ? "cannot read" : "too large for a tokenizer");
    else if (!(buf = malloc((size_t)n + 1)))
        st = base_fail(KILN_ERR_NOMEM, "%s: out of memory", path);
    else if (rewind(f), fread(buf, 1, (size_t)n, f) != (size_t)n)
        st = base_fail(KILN_ERR_FORMAT, "%s: cannot read", path);
    fclose(f);
    if (st) {
        free(buf);
        return st;
    }
    *len = (size_t)n;
    *out = buf;
    return KILN_OK;
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
static kiln_status open_checked(image_pipeline *p, const image_files *files, const image_config *config) {
    /* headers only: the readers map the files and list their tensors */
    kiln_status st;
    if ((st = ckpt_open(files->dit, &p->fd)) || (st = ckpt_open(files->t5, &p->ft)) ||
        (st = ckpt_open(files->vae, &p->fv)))
        return st;
    if (ckpt_format(p->fd) != CKPT_TORCH_ZIP) {
        return base_fail(KILN_ERR_FORMAT, "%s: the DiT must be a PyTorch ZIP state dictionary", files->dit);
    }
    if (ckpt_format(p->ft) != CKPT_SAFETENSORS || ckpt_format(p->fv) != CKPT_SAFETENSORS) {
        return base_fail(KILN_ERR_FORMAT, "%s: the text encoder and the VAE must be safetensors",
                         ckpt_format(p->ft) != CKPT_SAFETENSORS ? files->t5 : files->vae);
    }
    size_t tl = 0;
    uint8_t *tb;
    if ((st = read_all(files->tokenizer, &tl, 64u << 20, &tb))) return st;
    st = image_spiece_load(tb, tl, &p->tok);
    free(tb);
    if (st) return base_fail(st, "%s: %s", files->tokenizer, kiln_last_error());
    /* every schema before any model memory */
    image_t5 t5;
    image_dit dit;
    image_vae vae;
    const char *nd = base_name(files->dit), *nt = base_name(files->t5), *nv = base_name(files->vae);
    if ((st = image_t5_bind(&t5, p->ft, nt, config->max_distance, 1)) ||
        (st = image_dit_bind(&dit, p->fd, nd, config->head_dim, config->interp, 1)) ||
        (st = image_vae_bind(&vae, p->fv, nv, config->vae_groups, config->vae_scaling, 1)))
        return st;
    if (dit.caption != t5.d_model) {
        return base_fail(KILN_ERR_FORMAT, "%s takes %d-wide caption states but the text encoder %s gives %d", nd,
                         dit.caption, nt, t5.d_model);
    }
    if (dit.in_ch != vae.latent || (dit.out_ch != dit.in_ch && dit.out_ch != 2 * dit.in_ch)) {
        return base_fail(KILN_ERR_FORMAT, "%s has %d latent channels in and %d out, the VAE %s %d", nd, dit.in_ch,
                         dit.out_ch, nv, vae.latent);
    }
    if (dit.sample * image_vae_factor(&vae) != IMAGE_SIZE) {
        return base_fail(KILN_ERR_FORMAT, "%s with %s makes %d-pixel images; only %d x %d is supported", nd, nv,
                         dit.sample * image_vae_factor(&vae), IMAGE_SIZE, IMAGE_SIZE);
    }
    if (image_spiece_n_pieces(p->tok) > t5.n_vocab || image_spiece_eos(p->tok) < 0) {
        return base_fail(KILN_ERR_FORMAT, "the tokenizer (%d pieces%s) does not fit the text encoder's %d embeddings",
                         image_spiece_n_pieces(p->tok), image_spiece_eos(p->tok) < 0 ? ", no EOS" : "", t5.n_vocab);
    }
    return KILN_OK;
}

kiln_status image_pipeline_check(const image_files *files, const image_config *config) {
    image_pipeline *p = calloc(1, sizeof *p);
    if (!p) { return base_fail(KILN_ERR_NOMEM, "out of memory"); }
    const kiln_status rc = open_checked(p, files, config);
    image_pipeline_free(p);
    return rc;
}

kiln_status image_pipeline_open(const image_files *files, const image_config *config, int n_threads,
                                image_pipeline **out) {
    *out = NULL;
    image_pipeline *p = calloc(1, sizeof *p);
    if (!p) { return base_fail(KILN_ERR_NOMEM, "out of memory"); }
    p->cfg = *config;
    const char *nd = base_name(files->dit), *nt = base_name(files->t5), *nv = base_name(files->vae);
    kiln_status st;
    if ((st = open_checked(p, files, config))) goto fail;
    if ((st = image_t5_bind(&p->t5, p->ft, nt, config->max_distance, 0)) ||
        (st = image_dit_bind(&p->dit, p->fd, nd, config->head_dim, config->interp, 0)) ||
        (st = image_vae_bind(&p->vae, p->fv, nv, config->vae_groups, config->vae_scaling, 0)))
        goto fail;
    if (!(p->pool = thread_pool_new(n_threads))) {
        st = base_fail(KILN_ERR_NOMEM, "cannot start threads");
        goto fail;
    }
    *out = p;
    return KILN_OK;
fail:
    image_pipeline_free(p);
    return st;
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

kiln_status image_encode(image_pipeline *p, const int32_t *ids, int n, float *out) {
    return image_t5_encode(&p->t5, p->pool, ids, n, out);
}

kiln_status image_dit_once(image_pipeline *p, const float *x, float t, const float *ctx, int n, float *out) {
    image_dit_work *w = image_dit_work_new(&p->dit, p->pool, 1, &ctx, &n);
    if (!w) { return base_fail(KILN_ERR_NOMEM, "out of memory"); }
    image_dit_forward(&p->dit, p->pool, w, x, &t, out);
    image_dit_work_free(w);
    return KILN_OK;
}

kiln_status image_decode(image_pipeline *p, const float *z, float *img) {
    return image_vae_decode(&p->vae, p->pool, z, p->dit.sample, p->dit.sample, img);
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

kiln_status image_generate(image_pipeline *p, const image_request *r, uint8_t **png, size_t *png_len) {
    *png = NULL;
    *png_len = 0;
    const image_config *c = &p->cfg;
    const int steps = r->steps > 0 ? r->steps : c->steps;
    const float cfg = r->cfg >= 0 ? r->cfg : c->cfg;
    const int guided = cfg > 1.0f;
    if (!r->prompt) return base_fail(KILN_ERR_INVALID_ARG, "no prompt");
    const int S = p->dit.sample, lc = p->dit.in_ch, oc = p->dit.out_ch, W = image_pipeline_width(p);
    const size_t nz = (size_t)lc * (size_t)S * (size_t)S, D = (size_t)p->t5.d_model;
    int32_t *ids = malloc((size_t)c->max_tokens * sizeof *ids);
    float *ts = malloc((size_t)steps * sizeof *ts), *sig = malloc(((size_t)steps + 1) * sizeof *sig);
    float *ec = malloc((size_t)c->max_tokens * D * sizeof *ec), *eu = malloc(D * sizeof *eu);
    float *z = malloc(nz * sizeof *z), *x = malloc(2 * nz * sizeof *x), *o = malloc(2 * (size_t)oc * S * S * sizeof *o);
    float *img = malloc(3 * (size_t)W * (size_t)W * sizeof *img);
    uint8_t *rgb = malloc(3 * (size_t)W * (size_t)W);
    image_dit_work *w = NULL;
    kiln_status rc;
    if (!ids || !ts || !sig || !ec || !eu || !z || !x || !o || !img || !rgb) {
        rc = base_fail(KILN_ERR_NOMEM, "out of memory");
        goto done;
    }
    float init;
    if ((rc = image_sched_plan(&c->sched, steps, ts, sig, &init))) goto done;
    int n = image_tokenize(p, r->prompt, ids, c->max_tokens);
    if (n < 0) {
        rc = base_fail(KILN_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (n > c->max_tokens) {
        rc = base_fail(KILN_ERR_CONTEXT_FULL,
                       "the prompt is %d tokens; the text encoder takes at most %d (end token included)", n,
                       c->max_tokens);
        goto done;
    }
    if ((rc = image_encode(p, ids, n, ec))) goto done;
    const int32_t eos = image_spiece_eos(p->tok);
    if (guided && (rc = image_encode(p, &eos, 1, eu))) goto done;
    /* batch item 0 is the unconditional pass, 1 the prompt's */
    const float *ctx[2] = {eu, ec};
    const int len[2] = {1, n};
    const int B = guided ? 2 : 1;
    w = image_dit_work_new(&p->dit, p->pool, B, guided ? ctx : ctx + 1, guided ? len : len + 1);
    if (!w) {
        rc = base_fail(KILN_ERR_NOMEM, "out of memory");
        goto done;
    }
    image_rng g;
    image_rng_seed(&g, r->seed);
    image_rng_gauss(&g, z, nz);
    for (size_t i = 0; i < nz; i++) z[i] *= init;
    for (int s = 0; s < steps; s++) {
        if (r->progress && r->progress(r->user, s, steps)) {
            rc = base_fail(KILN_ERR_CANCELLED, "cancelled");
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
        rc = base_fail(KILN_ERR_CANCELLED, "cancelled");
        goto done;
    }
    if ((rc = image_decode(p, z, img))) goto done;
    image_to_pixels(img, W, W, rgb);
    if ((rc = image_png_encode(rgb, W, W, png, png_len))) goto done;
    rc = KILN_OK;
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
