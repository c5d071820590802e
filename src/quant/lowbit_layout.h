/*
 * Block layouts of the low-bit types TQ1_0, TQ2_0, MXFP4, IQ1_S and IQ1_M,
 * byte for byte as GGUF files store them (little-endian; f16 fields are IEEE
 * half bit patterns).  Shared by lowbit.c and its SIMD twins; private to the
 * quant folder.
 *
 * TQ*, IQ1_* hold 256 weights per block and dot with Q8_K activations;
 * MXFP4 holds 32 and dots with Q8_0.
 */
#ifndef KILN_LOWBIT_LAYOUT_H
#define KILN_LOWBIT_LAYOUT_H

#include <stdint.h>
#include <string.h>

#include "kquants_layout.h"

#define QUANT_QK_MXFP4 32

/* 1.6875 bits/weight, ternary: weight = d * (t - 1), t in {0, 1, 2}.  Five
 * trits per byte as the byte b = ceil(256 * v / 243) of their base-3 number
 * v (first trit most significant); trit k (0..4) of a byte is
 * ((uint8_t)(b * 3^k) * 3) >> 8.  qs bytes 0..31: trit k of byte m is
 * weight 32k + m; bytes 32..47: trit k of byte 32 + m is weight 160 + 16k
 * + m; qh bytes hold four trits (k = 0..3, a fifth zero trit below them):
 * trit k of qh[j] is weight 240 + 4k + j. */
typedef struct {
    uint8_t qs[48];
    uint8_t qh[4];
    uint16_t d;
} quant_block_tq1_0;

/* 2.0625 bits/weight, ternary: 2-bit t in {0, 1, 2}, weight = d * (t - 1).
 * Bits 2l..2l+1 of qs[32g + m] hold weight 128g + 32l + m. */
typedef struct {
    uint8_t qs[QUANT_QK_K / 4];
    uint16_t d;
} quant_block_tq2_0;

/* 4.25 bits/weight, OCP microscaling FP4: an E8M0 scale e (2^(e - 127))
 * and E2M1 codes, byte l holding weight l (low nibble) and 16 + l (high).
 * Codes index quant_mxfp4_values, which are twice the E2M1 values, so the
 * scale applied is half of 2^(e - 127) (quant_e8m0_half). */
typedef struct {
    uint8_t e;
    uint8_t qs[QUANT_QK_MXFP4 / 2];
} quant_block_mxfp4;

/* 1.5625 bits/weight.  8 sub-blocks of 32 weights, each 4 groups of 8 taken
 * from the 2048-entry quant_iq1s_grid (8 values in {-1, 0, 1}).  Group l of
 * sub-block b: index qs[4b + l] | ((qh[b] >> 3l) & 7) << 8; qh[b] bits
 * 12..14 give the scale s (multiplier 2s + 1), bit 15 the sign of the
 * shift delta = +-1/8: weight = d * (2s + 1) * (grid value + delta). */
typedef struct {
    uint16_t d;
    uint8_t qs[QUANT_QK_K / 8];
    uint16_t qh[QUANT_QK_K / 32];
} quant_block_iq1_s;

/* 1.75 bits/weight.  Grid groups as IQ1_S, with index qs[4b + l] | bits
 * from qh[2b + l/2]: low nibble for even l, high nibble for odd l, bits 0..2
 * of the nibble the top of the index, bit 3 the sign of that group's delta.
 * scales, read as four little-endian u16 w[0..3]: sub-block b's 3-bit
 * scales for groups 0-1 and 2-3 in bits 6(b%2) and 6(b%2) + 3 of w[b/2];
 * the f16 block scale d is the top nibbles w[0] >> 12 | w[1] >> 8 & 0xf0 |
 * w[2] >> 4 & 0xf00 | w[3] & 0xf000. */
typedef struct {
    uint8_t qs[QUANT_QK_K / 8];
    uint8_t qh[QUANT_QK_K / 16];
    uint8_t scales[QUANT_QK_K / 32];
} quant_block_iq1_m;

_Static_assert(sizeof(quant_block_tq1_0) == 54, "TQ1_0 block size");
_Static_assert(sizeof(quant_block_tq2_0) == 66, "TQ2_0 block size");
_Static_assert(sizeof(quant_block_mxfp4) == 17, "MXFP4 block size");
_Static_assert(sizeof(quant_block_iq1_s) == 50, "IQ1_S block size");
_Static_assert(sizeof(quant_block_iq1_m) == 56, "IQ1_M block size");

/* The IQ1_S / IQ1_M grid (part of the format): 8 int8 values per entry,
 * value j in byte j. */
extern const uint64_t quant_iq1s_grid[2048];

/* Twice the E2M1 values of the 16 FP4 codes (part of the format as GGUF
 * uses it). */
static const int8_t quant_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* 2^(e - 128), half the E8M0 scale, exactly (e = 0, 1 give the subnormals
 * 2^-128, 2^-127; e = 255, a NaN in E8M0, gives 2^127 as GGUF readers do). */
static inline float quant_e8m0_half(uint8_t e) {
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* IQ1_M's f16 block scale, from the top nibbles of its scale words. */
static inline uint16_t quant_iq1m_d(const quant_block_iq1_m *x) {
    uint16_t w[4];
    memcpy(w, x->scales, sizeof w);
    return (uint16_t)((w[0] >> 12) | ((w[1] >> 8) & 0x00f0) | ((w[2] >> 4) & 0x0f00) | (w[3] & 0xf000));
}

/* Sub-block b's two IQ1_M scale multipliers (2s + 1): groups 0-1, 2-3. */
static inline void quant_iq1m_scales(const quant_block_iq1_m *x, int b, int *ls1, int *ls2) {
    uint16_t w;
    memcpy(&w, x->scales + 2 * (b / 2), sizeof w);
    *ls1 = 2 * ((w >> (6 * (b % 2))) & 7) + 1;
    *ls2 = 2 * ((w >> (6 * (b % 2) + 3)) & 7) + 1;
}

/* Grid index of IQ1_M group l (0..3) of sub-block b. */
static inline int quant_iq1m_index(const quant_block_iq1_m *x, int b, int l) {
    return x->qs[4 * b + l] | (((unsigned)x->qh[2 * b + l / 2] << (8 - 4 * (l % 2))) & 0x700);
}

/* Grid index of IQ1_S group l (0..3) of sub-block b. */
static inline int quant_iq1s_index(const quant_block_iq1_s *x, int b, int l) {
    return x->qs[4 * b + l] | ((x->qh[b] >> (3 * l)) & 7) << 8;
}

#endif
