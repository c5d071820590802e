/*
 * pack — Q4_0 weights interleaved by 8 rows ("q4_0x8"), and the int8
 * activation blocks their kernel reads.
 *
 * A row-major Q4_0 matrix gives every row its own run of 18-byte blocks, so
 * a dot product reads one row at a time and reduces each block across
 * lanes.  In q4_0x8 the blocks of 8 consecutive rows sit side by side:
 *
 *     kk_q4_0x8 { d[8]; qs[128] },  qs[32k + 4i + j] = qs[4k + j] of row i
 *
 * for k = 0..3 (4-byte groups), i = 0..7 (row), j = 0..3.  One 32-byte
 * load then holds the same 4-byte group of all 8 rows, so after nibble
 * masking each 32-bit lane is one row: a broadcast of 4 activation bytes,
 * maddubs and 16-bit adds leave the 8 rows' sums in the 8 lanes with no
 * horizontal step.  Low nibbles are elements 4k + j, high nibbles 16 + 4k + j.
 *
 * Activations for these kernels are kk_act8 blocks laid out [block][token]
 * (block b of token t at a[b * lda + t]), so one weight block, unpacked
 * once, meets every token of a batch.  Quantization is the same as Q8_0's
 * (d = amax / 127 rounded to F16), so results equal the row-by-row Q4_0 x
 * Q8_0 dot up to float summation order; s8 = 8 * sum(qs) takes off the
 * Q4_0 zero point.
 *
 * The same matrix is also kept as a plain Q4_0 tensor; kk_mat.packed points
 * at the q4_0x8 copy when the model was repacked at load.
 */
#ifndef KILN_PACK_H
#define KILN_PACK_H

#include <stddef.h>
#include <stdint.h>

typedef struct kk_q4_0x8 {
    uint16_t d[8];    /* F16 scale of each row's block */
    uint8_t qs[128];  /* interleaved nibbles, see above */
} kk_q4_0x8;

typedef struct kk_act8 {
    int8_t qs[32];
    float d;          /* scale (an F16 value, as in Q8_0) */
    int32_t s8;       /* 8 * sum of qs */
} kk_act8;

/* Packs blocks [b0, b0 + nb) of the 8 Q4_0 rows at w, w + wrow, ... into
 * out[0 .. nb). */
void kk_pack_q4_0x8(const void *w, size_t wrow, int b0, int nb, kk_q4_0x8 *out);

/* Quantizes n (a multiple of 32) floats to kk_act8 blocks a[b * lda]. */
void kk_act8_from_f32(const float *x, int64_t n, kk_act8 *a, size_t lda);

/* Accumulates the products of one 8-row group with n_tok tokens:
 *     acc[8 t + i] += sum over blocks b < nb of  w[b] row i . a[b * lda + t]
 * Each block's int32 sum is scaled by fma(sum, d_w * d_a, acc), in this
 * order in every twin, so the scalar and SIMD kernels agree bit for bit. */
typedef void (*kk_x8_fn)(int nb, const kk_q4_0x8 *w, const kk_act8 *a, size_t lda, int n_tok, float *acc);

/* The kernel at exactly level isa (KQ_ISA_*), NULL if there is none. */
kk_x8_fn kk_x8_q4_0_at(int isa);
/* The best kernel for this CPU under the active ISA cap. */
kk_x8_fn kk_x8_q4_0_best(void);
kk_x8_fn kk_x8_q4_0_avx2(void);

/* Interleaved copy of a whole Q4_0 matrix (nrows % 8 == 0, ncols % 32 == 0):
 * group g, block b at out[g * (ncols / 32) + b].  Bytes it needs: */
size_t kk_q4_0x8_size(int64_t ncols, int64_t nrows);
void kk_pack_q4_0x8_matrix(const void *w, int64_t ncols, int64_t nrows, kk_q4_0x8 *out);

#endif
