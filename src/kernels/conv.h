/*
 * conv — the image kernels: 2-D convolution, group normalization (with an
 * optional fused SiLU) and nearest-neighbour 2x upsampling, over images
 * stored channel-major, [c][h][w] F32.
 *
 * A convolution's weight is a kk_mat of cout rows of cin * kh * kw
 * elements, in PyTorch's [cout][cin][kh][kw] order, of any type matmul.h
 * takes (F32, F16, BF16 from checkpoints).  kk_conv2d gathers a band of
 * output rows into patch rows (im2col, [pixel][cin * kh * kw]), multiplies
 * them by the weight with kk_matmul and writes the band's pixels back
 * channel-major, adding the bias.  kk_conv2d_ref is the direct six-loop
 * scalar twin the tests compare with.
 *
 * Group norm: channels split into g equal groups; each group's mean and
 * variance over its (c / g) * h * w values are summed in double, one
 * thread per group (so results do not depend on the thread count), then
 * y = (x - mean) / sqrt(var + eps) * w[c] + b[c], and y = y * sigmoid(y)
 * when silu is set.  The AVX2 twin does the same sums in vector lanes and
 * a polynomial exp for the SiLU; it matches the scalar twin within 1e-6
 * relative (the tests check).
 */
#ifndef KILN_CONV_H
#define KILN_CONV_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/matmul.h"
#include "thread/pool.h"

typedef struct kk_conv {
    const kk_mat *wt;  /* cout rows of cin * kh * kw */
    const float *bias; /* [cout] or NULL */
    int cin, h, w;     /* input image */
    int kh, kw, stride, pad;
} kk_conv;

static inline int kk_conv_out(int in, int k, int stride, int pad) { return (in + 2 * pad - k) / stride + 1; }

/* Scratch bytes kk_conv2d needs for c (patch rows, the product of one
 * band, and the matmul's own scratch). */
size_t kk_conv2d_scratch(const kk_conv *c);
/* y [cout][ho][wo] = conv(x [cin][h][w]).  y must not overlap x. */
void kk_conv2d(kpool *pool, const kk_conv *c, const float *x, float *y, void *scratch);
/* The direct scalar twin (weights expanded one row at a time). */
void kk_conv2d_ref(const kk_conv *c, const float *x, float *y);

/* One group norm over x [c][hw] into y (may be x).  w, b: [c] or NULL. */
typedef struct kk_gn {
    int c, hw, groups;
    float eps;
    int silu;
    const float *w, *b;
} kk_gn;

typedef void (*kk_gn_fn)(const kk_gn *g, const float *x, float *y, int group);
/* The per-group kernel of level isa (KQ_ISA_*; the AVX-512 level's is the
 * AVX2 one), NULL if the CPU lacks the level. */
kk_gn_fn kk_groupnorm_at(int isa);
/* All groups through the best kernel, the groups spread over the pool. */
void kk_groupnorm(kpool *pool, const kk_gn *g, const float *x, float *y);

/* y [c][2h][2w] = x [c][h][w], each value repeated 2 x 2. */
void kk_upsample2x(const float *x, float *y, int c, int h, int w);

#endif
