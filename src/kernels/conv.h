/*
 * conv — the image kernels: 2-D convolution, group normalization (with an
 * optional fused SiLU) and nearest-neighbour 2x upsampling, over images
 * stored channel-major, [c][h][w] F32.
 *
 * A convolution's weight is a kern_mat of cout rows of cin * kh * kw
 * elements, in PyTorch's [cout][cin][kh][kw] order, of any type matmul.h
 * takes (F32, F16, BF16 from checkpoints).  kern_conv2d widens it to F32 once
 * and multiplies it through kern_gemm by the im2col of the input ([cin * kh
 * * kw][pixel], packed panel by panel, never stored whole), so the result
 * lands channel-major with the bias as each chain's start.  kern_conv2d_ref
 * is the direct six-loop scalar twin the tests compare with.
 *
 * The convolution's product and the image models' large linear layers run
 * on kern_gemm (below), whose outputs are single fused multiply-add chains:
 * the same bits at every thread count, blocking and ISA level.
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

/*
 * The image GEMM: C [m][n] = init + A [m][k] B [k][n] with A and C F32
 * rows (strides lda, ldc floats).  Output (i, j) starts from its initial
 * value (bias_n[j], else bias_m[i], else 0) and takes the k products in
 * order, one fused multiply-add each, in one chain: no partial sums, so the
 * result depends neither on the thread count, nor on the blocking, nor on
 * the ISA level (the scalar twin uses fmaf, the AVX2 kernel vfmadd on the
 * same operands).
 *
 * Shape: columns go in chunks of KERN_GEMM_NC (the work items the threads
 * take from a counter; with few chunks the rows split too), k in blocks of
 * KERN_GEMM_KC.  Per chunk and k-block the B values are packed once into
 * 16-column panels [kc][16] F32 (in L2), then every group of 6 rows of A
 * passes over the chunk's panels in one call of the level's tile: AVX2
 * takes them 16 columns at a time, a 6 x 16 register tile (per k 2 panel
 * loads, 6 broadcasts of A, 12 fmas); AVX-512 64 at a time, 6 x 64 (per k
 * 4 panel loads, 6 broadcasts, 24 fmas).  The tile's sums go back to C
 * between k-blocks (a float store and load keep the chain's bits).
 *
 * B comes as one of:
 *   KERN_GB_ROWS  the transpose given as n rows of k values (a weight W
 *               [n][k] of F32, F16 or BF16, rows rowb bytes apart): C = A W^T
 *   KERN_GB_KN    F32 [k][n], rows ldb floats apart
 *   KERN_GB_CONV  the im2col of a convolution's input (kern_conv2d's own)
 */
enum { KERN_GB_ROWS, KERN_GB_KN, KERN_GB_CONV };
#define KERN_GEMM_NC 64
#define KERN_GEMM_KC 256
#define KERN_GEMM_MR 6

typedef struct kern_gemm {
    int m, n, k;
    const float *a;
    size_t lda;
    int b_kind;
    const void *b; /* ROWS: row 0 of W; KN: B; CONV: the kern_conv2d job */
    int b_type;    /* ROWS: QUANT_F32, QUANT_F16 or QUANT_BF16 */
    size_t ldb;    /* ROWS: bytes between rows; KN: floats between rows */
    float *c;
    size_t ldc;
    const float *bias_n, *bias_m; /* [n], [m] or NULL */
} kern_gemm;

/* The level's kernels: the tile over kc k (mr <= 6 rows of a, nr <=
 * KERN_GEMM_NC columns of the panels at bp, each [kc][16] and kc * 16 floats
 * after the last, c read and written), and the ROWS
 * packer (panels of nc <= KERN_GEMM_NC columns from rows n0 .. of w, zero
 * columns past n). */
typedef void (*kern_gemm_tile_fn)(int mr, int nr, int kc, const float *a, size_t lda, const float *bp, float *c,
                                  size_t ldc);
typedef void (*kern_gemm_pack_fn)(const kern_gemm *g, int k0, int kc, int n0, int nc, float *panel);

/* C as above through the best level's kernels, the chunks spread over the
 * pool (NULL: the calling thread alone). */
void kern_gemm_run(thread_pool *pool, const kern_gemm *g);
/* The same through the kernels of level isa (QUANT_ISA_*), for the tests; -1
 * when the CPU lacks it. */
int kern_gemm_run_at(thread_pool *pool, const kern_gemm *g, int isa);
/* The same through the given tile and the scalar packer, for the tests (a
 * twin built on emulated intrinsics). */
void kern_gemm_run_tile(thread_pool *pool, const kern_gemm *g, kern_gemm_tile_fn tile);

typedef struct kern_conv {
    const kern_mat *wt; /* cout rows of cin * kh * kw */
    const float *bias;  /* [cout] or NULL */
    int cin, h, w;      /* input image */
    int kh, kw, stride, pad;
} kern_conv;

static inline int kern_conv_out(int in, int k, int stride, int pad) { return (in + 2 * pad - k) / stride + 1; }

/* Scratch bytes kern_conv2d needs for c (the weight widened to F32). */
size_t kern_conv2d_scratch(const kern_conv *c);
/* y [cout][ho][wo] = conv(x [cin][h][w]).  y must not overlap x. */
void kern_conv2d(thread_pool *pool, const kern_conv *c, const float *x, float *y, void *scratch);
/* The direct scalar twin (weights expanded one row at a time). */
void kern_conv2d_ref(const kern_conv *c, const float *x, float *y);

/* One group norm over x [c][hw] into y (may be x).  w, b: [c] or NULL. */
typedef struct kern_gn {
    int c, hw, groups;
    float eps;
    int silu;
    const float *w, *b;
} kern_gn;

typedef void (*kern_gn_fn)(const kern_gn *g, const float *x, float *y, int group);
/* The per-group kernel of level isa (QUANT_ISA_*; the AVX-512 level's is the
 * AVX2 one), NULL if the CPU lacks the level. */
kern_gn_fn kern_groupnorm_at(int isa);
/* All groups through the best kernel, the groups spread over the pool. */
void kern_groupnorm(thread_pool *pool, const kern_gn *g, const float *x, float *y);

/* In place: x = gelu(x), the tanh approximation written through one
 * exponential, x / (1 + e^(-2 sqrt(2/pi) (x + 0.044715 x^3))) (the same
 * function as ops.h's kern_gelu).  The AVX2 twin takes x86.h's exp8 and
 * matches the scalar one (expf) within 1e-6 relative; values are
 * independent, so the pool's split changes nothing. */
typedef void (*kern_gelu_fn)(float *x, size_t n);
kern_gelu_fn kern_gelu_tanh_at(int isa);
void kern_gelu_tanh(thread_pool *pool, float *x, size_t n);

/* y [c][2h][2w] = x [c][h][w], each value repeated 2 x 2. */
void kern_upsample2x(const float *x, float *y, int c, int h, int w);

#endif
