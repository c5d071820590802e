/*
 * pack — weights interleaved by 8 rows (Q4_0 as "q4_0x8", Q8_0 as
 * "q8_0x8", Q4_K as "q4_Kx8", Q6_K as "q6_Kx8"), and the int8 activation
 * blocks their kernels read.
 *
 * A row-major Q4_0 matrix gives every row its own run of 18-byte blocks, so
 * a dot product reads one row at a time and reduces each block across
 * lanes.  In q4_0x8 the blocks of 8 consecutive rows sit side by side:
 *
 *     kern_q4_0x8 { d[8]; qs[128] },  qs[32k + 4i + j] = qs[4k + j] of row i
 *
 * for k = 0..3 (4-byte groups), i = 0..7 (row), j = 0..3.  One 32-byte
 * load then holds the same 4-byte group of all 8 rows, so after nibble
 * masking each 32-bit lane is one row: a broadcast of 4 activation bytes,
 * maddubs and 16-bit adds leave the 8 rows' sums in the 8 lanes with no
 * horizontal step.  Low nibbles are elements 4k + j, high nibbles 16 + 4k + j.
 *
 * Activations for these kernels are kern_act8 blocks laid out [block][token]
 * (block b of token t at a[b * lda + t]), so one weight block, unpacked
 * once, meets every token of a batch.  Quantization is the same as Q8_0's
 * (d = amax / 127 rounded to F16), so results equal the row-by-row Q4_0 x
 * Q8_0 dot up to float summation order; s8 = 8 * sum(qs) takes off the
 * Q4_0 zero point.
 *
 * kern_mat.packed points at the interleaved copy when the model was
 * repacked at load (the mapped original is then released).
 */
#ifndef KILN_PACK_H
#define KILN_PACK_H

#include <stddef.h>
#include <stdint.h>

typedef struct kern_q4_0x8 {
    uint16_t d[8];   /* F16 scale of each row's block */
    uint8_t qs[128]; /* interleaved nibbles, see above */
} kern_q4_0x8;

typedef struct kern_act8 {
    int8_t qs[32];
    float d;    /* scale (an F16 value, as in Q8_0) */
    int32_t s8; /* 8 * sum of qs */
} kern_act8;

/* Q8_0 interleaved by 8 rows ("q8_0x8"): qs[32k + 4i + j] = qs[4k + j] of
 * row i (k < 8), the same 272 bytes as 8 blocks.  Its activations are
 * kern_act8 (s8 unused).  The weights are signed, so maddubs takes |w| and
 * the activation with w's sign, per token. */
typedef struct kern_q8_0x8 {
    uint16_t d[8];
    int8_t qs[256];
} kern_q8_0x8;

/* Q6_K interleaved by 8 rows ("q6_Kx8"), one 256-weight super-block:
 *     ql[32k + 4i + j] = ql[4k + j] of row i   (k < 32)
 *     qh[32k + 4i + j] = qh[4k + j] of row i   (k < 16)
 *     sc[8 * s + i]    = scale of sub-block s (16 weights) of row i
 * The same bytes as 8 Q6_K blocks (1680), regrouped so that, as for
 * q4_0x8, one load holds a 4-byte group of all 8 rows.  Its activations
 * are Q8_K blocks (with their 16-element sums), also [block][token]. */
typedef struct kern_q6_Kx8 {
    uint16_t d[8];
    int8_t sc[128];
    uint8_t ql[1024];
    uint8_t qh[512];
} kern_q6_Kx8;

/* Q4_K interleaved by 8 rows ("q4_Kx8"), one 256-weight super-block, with
 * the 6-bit scales and mins unpacked to bytes (1184 bytes, 8 rows):
 *     qs[32k + 4i + j] = qs[4k + j] of row i   (k < 32)
 *     sc[8 * s + i], mn[8 * s + i] = scale and min of sub-block s of row i
 * Activations are Q8_K blocks [block][token], as for q6_Kx8. */
typedef struct kern_q4_Kx8 {
    uint16_t d[8], dmin[8];
    uint8_t sc[64], mn[64];
    uint8_t qs[1024];
} kern_q4_Kx8;

/* Accumulates the products of one 8-row group with n_tok tokens:
 *     acc[8 t + i] += sum over blocks b < nb of  w[b] row i . a[b * lda + t]
 * Each block's int32 sum is scaled by fma(sum, d_w * d_a, acc), in this
 * order in every twin, so the scalar and SIMD kernels agree bit for bit. */
typedef void (*kern_x8_fn)(int nb, const void *w, const void *a, size_t lda, int n_tok, float *acc);

/* One token over ng consecutive groups of a packed matrix, nb blocks each
 * (group g at block g * nb of w):
 *     y[8 g + i] = row i of group g . a   (a's blocks lda apart)
 * the sums of kern_x8_fn from a zero accumulator, so the same bits.  A decode
 * step's piece of a matrix in one call: with one block per row (a 256-wide
 * expert's down projection) a call per group cost as much as its block. */
typedef void (*kern_x8_dec_fn)(int ng, int nb, const void *w, const void *a, size_t lda, float *y);

/* What the matmul driver and the loader need to know of one interleaved
 * format. */
typedef struct kern_x8_traits {
    int type;      /* the plain weight type (QUANT_Q4_0, QUANT_Q8_0, QUANT_Q4_K, QUANT_Q6_K) */
    int act_type;  /* its activation type (QUANT_Q8_0 content / QUANT_Q8_K) */
    int blk;       /* weights per block along a row */
    size_t pblock; /* bytes of one packed block (8 rows) */
    size_t ablock; /* bytes of one activation block */
    /* packs blocks [b0, b0 + nb) of the 8 rows at w, w + wrow, ... */
    void (*pack)(const void *w, size_t wrow, int b0, int nb, void *out);
    /* quantizes n floats to activation blocks at a, a + lda blocks, ... */
    void (*act)(const float *x, int64_t n, void *a, size_t lda);
    /* row i (< 8) of a packed group of nb blocks, to F32 */
    void (*get_row)(const void *g, int i, int nb, float *out);
} kern_x8_traits;

/* The traits of weight type t, NULL when it has no interleaved form. */
const kern_x8_traits *kern_x8_get(int t);
/* The kernel of type t at level isa (QUANT_ISA_*), NULL if t has none or the
 * CPU lacks the level; kern_x8_best: at the level quant_init() chose
 * (kernels/level.c; pack_avx2.c, pack_avx512.c hold the SIMD ones). */
kern_x8_fn kern_x8_at(int t, int isa);
kern_x8_fn kern_x8_best(int t);
/* The same for the one-token kernel over groups. */
kern_x8_dec_fn kern_x8_dec_at(int t, int isa);
kern_x8_dec_fn kern_x8_dec_best(int t);

/* The Q4_0 pieces, named for tests and callers that know the type. */
void kern_pack_q4_0x8(const void *w, size_t wrow, int b0, int nb, kern_q4_0x8 *out);
void kern_act8_from_f32(const float *x, int64_t n, kern_act8 *a, size_t lda);

/* Interleaved copy of a whole matrix of type t (nrows % 8 == 0, ncols a
 * multiple of the block): group g, block b at block g * nb + b. */
size_t kern_x8_matrix_size(int t, int64_t ncols, int64_t nrows);
void kern_x8_pack_matrix(int t, const void *w, int64_t ncols, int64_t nrows, void *out);

#endif
