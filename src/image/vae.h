/*
 * vae — the decoder of Stable Diffusion's AutoencoderKL, tensors named as
 * diffusers names them (post_quant_conv, decoder.conv_in,
 * decoder.mid_block.{resnets.0, attentions.0, resnets.1},
 * decoder.up_blocks.N.{resnets.M, upsamplers.0.conv}, decoder.conv_norm_out,
 * decoder.conv_out).  Encoder tensors in the same file are ignored.
 *
 * z / scaling_factor -> post_quant_conv (1x1) -> conv_in (3x3) -> mid
 * (ResNet, single-head attention over the pixels with a residual, ResNet)
 * -> up blocks from the widest channels down (layers_per_block + 1 ResNets
 * each, a nearest 2x upsample and 3x3 conv after all but the last) ->
 * GroupNorm + SiLU -> conv_out to RGB in [-1, 1].  A ResNet is
 * x' = shortcut(x) + conv2(silu(gn2(conv1(silu(gn1(x)))))), the shortcut a
 * 1x1 conv when the channel count changes.  GroupNorm eps is 1e-6.
 */
#ifndef KILN_IMAGE_VAE_H
#define KILN_IMAGE_VAE_H

#include "image/nn.h"
#include "kernels/conv.h"

#define IMAGE_VAE_MAX_BLOCKS 8

typedef struct image_conv {
    kern_mat w;
    float *b;
    int cin, cout, k;
} image_conv;

typedef struct image_resnet {
    float *n1w, *n1b, *n2w, *n2b;
    image_conv c1, c2, sc; /* sc.cout == 0: identity shortcut */
    int cin, cout;
} image_resnet;

typedef struct image_vae {
    int latent, groups, n_blocks, layers; /* layers = resnets per up block */
    int ch[IMAGE_VAE_MAX_BLOCKS];         /* block_out_channels, narrowest first */
    float scaling;
    image_conv pq, conv_in, conv_out;
    image_resnet mid0, mid1;
    float *an_w, *an_b; /* mid attention group norm */
    image_lin aq, ak, av, ao;
    image_resnet *res;                   /* [n_blocks][layers] */
    image_conv up[IMAGE_VAE_MAX_BLOCKS]; /* up[i] for i < n_blocks - 1 */
    float *no_w, *no_b;
} image_vae;

int image_vae_bind(image_vae *m, const ckpt_file *f, const char *what, int groups, float scaling, int check, char *err,
                   size_t errlen);
void image_vae_free(image_vae *m);
/* Pixels per latent step in each direction (2^(n_blocks - 1)). */
static inline int image_vae_factor(const image_vae *m) { return 1 << (m->n_blocks - 1); }
/* img [3][h f][w f] = decode(z [latent][h][w]); allocates its buffers for
 * the call.  -1 with err when out of memory. */
int image_vae_decode(const image_vae *m, thread_pool *pool, const float *z, int h, int w, float *img, char *err,
                     size_t errlen);

#endif
