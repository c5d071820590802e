/*
 * dit — the diffusion transformer with the PixArt-alpha layout, tensors
 * named as diffusers' PixArtTransformer2DModel names them:
 *   pos_embed.proj            patch embedding, a conv of kernel = stride = p
 *   adaln_single.emb.timestep_embedder.linear_{1,2}, adaln_single.linear
 *                             the timestep embedding (256 sinusoids, cos
 *                             first) and its 6 x hidden adaLN vector, shared
 *                             by every block
 *   caption_projection.linear_{1,2}   text states to hidden (GELU between)
 *   transformer_blocks.N      scale_shift_table [6][hidden] plus the shared
 *                             vector give shift/scale/gate of attention and
 *                             MLP; attn1 self-attention on the modulated
 *                             layer norm, attn2 cross-attention to the
 *                             caption (no norm before it), ff.net.{0.proj,2}
 *                             the GELU MLP
 *   scale_shift_table, proj_out   the final modulated norm and projection,
 *                             then unpatchify.
 * Layer norms carry no weights (eps 1e-6); GELU is the tanh approximation.
 * The 2-D sin-cos position table follows diffusers (column in the first
 * half of each vector, row in the second; positions scaled by
 * base / grid / interpolation_scale).  Micro-conditions (the 1024-pixel
 * models' resolution embedder) are not supported.
 */
#ifndef KILN_IMAGE_DIT_H
#define KILN_IMAGE_DIT_H

#include "image/nn.h"

typedef struct image_dit_block {
    float *sst; /* [6][hidden] */
    image_lin q1, k1, v1, o1, q2, k2, v2, o2, ff1, ff2;
} image_dit_block;

typedef struct image_dit {
    int hidden, heads, hd, depth, patch, in_ch, out_ch, sample, caption, ff;
    float interp;
    int grid, n_tok;   /* grid = sample / patch; n_tok = grid^2 */
    image_lin patch_w; /* [hidden][in_ch * p * p] */
    image_lin t1, t2, ada, c1, c2, proj;
    image_dit_block *blk;
    float *sst_out; /* [2][hidden] */
    float *pos;     /* [n_tok][hidden] */
} image_dit;

/* Infers the sizes from f (the heads from head_dim) and binds every
 * tensor; check set: verify only, nothing allocated. */
int image_dit_bind(image_dit *m, const ckpt_file *f, const char *what, int head_dim, float interp, int check, char *err,
                   size_t errlen);
void image_dit_free(image_dit *m);

/* A request's buffers: a batch of b items, each with its own caption
 * states (ctx_len[i] rows of caption floats).  The caption projection and
 * every block's cross-attention keys and values are computed here once;
 * a step allocates nothing. */
typedef struct image_dit_work image_dit_work;
image_dit_work *image_dit_work_new(const image_dit *m, thread_pool *pool, int b, const float *const *ctx,
                                   const int *ctx_len);
void image_dit_work_free(image_dit_work *w);
/* out [b][out_ch][sample][sample] = the model on x [b][in_ch][sample][sample]
 * at timesteps t[b]. */
void image_dit_forward(const image_dit *m, thread_pool *pool, image_dit_work *w, const float *x, const float *t,
                       float *out);

#endif
