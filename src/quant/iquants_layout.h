/*
 * Block layouts of the lattice ("i-quant") types IQ2_XXS, IQ2_XS, IQ2_S,
 * IQ3_XXS and IQ3_S, byte for byte as GGUF files store them, and the
 * helpers that decode them.  Shared by iquants.c and its SIMD twins;
 * private to the quant folder.
 *
 * Every type holds 256 weights per block with an f16 scale d.  Weights come
 * in groups of 8 (IQ2) or 4 (IQ3) whose magnitudes are one entry of a
 * fixed grid (iquants_grid.c); a sign bit per weight flips it.  A 4-bit
 * scale s of a run of 16 or 32 weights gives the weight
 *     IQ2_*:   d * (0.5 + s) / 4 * magnitude * sign
 *     IQ3_XXS: d * (0.5 + s) / 2 * magnitude * sign
 *     IQ3_S:   d * (1 + 2s) * magnitude * sign
 * (the dot kernels use the odd integer 2s + 1 and fold the halving into the
 * final factor: 1/8 for IQ2, 1/4 for IQ3_XXS, 1 for IQ3_S).
 */
#ifndef KILN_IQUANTS_LAYOUT_H
#define KILN_IQUANTS_LAYOUT_H

#include <stdint.h>

#include "kquants_layout.h"

/* 2.0625 bits/weight.  Per 32 weights ib, qs[4ib..4ib+3] as two uint32
 * a (low) and b (high): byte l of a is the iq2xxs grid index of weights
 * 8l..8l+7; bits 7l..7l+6 of b the 7-bit sign code of that group (see
 * quant_iq_signs); bits 28..31 of b the scale. */
typedef struct {
    uint16_t d;
    uint16_t qs[QUANT_QK_K / 8];
} quant_block_iq2_xxs;

/* 2.3125 bits/weight.  qs[g] covers weights 8g..8g+7: low 9 bits the
 * iq2xs grid index, high 7 bits the sign code.  scales[ib]: low nibble the
 * scale of weights 32ib..32ib+15, high nibble of 32ib+16..32ib+31. */
typedef struct {
    uint16_t d;
    uint16_t qs[QUANT_QK_K / 8];
    uint8_t scales[QUANT_QK_K / 32];
} quant_block_iq2_xs;

/* 2.5625 bits/weight.  qs[0..31]: low 8 bits of the 10-bit iq2s grid index
 * of group g (weights 8g..8g+7); bits 2(g%4)..2(g%4)+1 of qh[g/4] its top 2
 * bits.  qs[32 + g]: the 8 sign bits of group g (bit j = weight 8g + j).
 * scales as IQ2_XS. */
typedef struct {
    uint16_t d;
    uint8_t qs[QUANT_QK_K / 4];
    uint8_t qh[QUANT_QK_K / 32];
    uint8_t scales[QUANT_QK_K / 32];
} quant_block_iq2_s;

/* 3.0625 bits/weight.  qs[0..63]: iq3xxs grid index of each group of 4
 * weights.  qs[64 + 4ib..]: one uint32 per 32 weights ib, bits 7l..7l+6 the
 * sign code of weights 32ib + 8l..+7, bits 28..31 the scale. */
typedef struct {
    uint16_t d;
    uint8_t qs[3 * QUANT_QK_K / 8];
} quant_block_iq3_xxs;

/* 3.4375 bits/weight.  qs[k]: low 8 bits of the 9-bit iq3s grid index of
 * weights 4k..4k+3; bit k%8 of qh[k/8] its ninth bit.  signs[g]: the 8 sign
 * bits of weights 8g..8g+7.  scales[j]: low nibble the scale of weights
 * 64j..64j+31, high nibble of 64j+32..64j+63. */
typedef struct {
    uint16_t d;
    uint8_t qs[QUANT_QK_K / 4];
    uint8_t qh[QUANT_QK_K / 32];
    uint8_t signs[QUANT_QK_K / 8];
    uint8_t scales[QUANT_QK_K / 64];
} quant_block_iq3_s;

_Static_assert(sizeof(quant_block_iq2_xxs) == 66, "IQ2_XXS block size");
_Static_assert(sizeof(quant_block_iq2_xs) == 74, "IQ2_XS block size");
_Static_assert(sizeof(quant_block_iq2_s) == 82, "IQ2_S block size");
_Static_assert(sizeof(quant_block_iq3_xxs) == 98, "IQ3_XXS block size");
_Static_assert(sizeof(quant_block_iq3_s) == 110, "IQ3_S block size");

/* The grids (iquants_grid.c): entry k packs the magnitudes of its group,
 * byte j = weight j of the group. */
extern const uint64_t quant_iq2xxs_grid[256];
extern const uint64_t quant_iq2xs_grid[512];
extern const uint64_t quant_iq2s_grid[1024];
extern const uint32_t quant_iq3xxs_grid[256];
extern const uint32_t quant_iq3s_grid[512];

/* The 8 sign bits (bit j set = weight j negative) of a 7-bit sign code c:
 * the eighth bit is the parity of the other seven, so every group has an
 * even number of negative weights (quant_iq_sign_codes holds all 128). */
extern const uint8_t quant_iq_sign_codes[128];
static inline uint8_t quant_iq_signs(uint32_t c) { return quant_iq_sign_codes[c & 127]; }
/* quant_iq_signs(c) as 8 bytes, 0x01 where the bit is clear, 0xff where set. */
extern const uint64_t quant_iq_sign_units[128];

/* Grid index of group g (0..31) of an IQ2_S block. */
static inline int quant_iq2s_index(const quant_block_iq2_s *b, int g) {
    return b->qs[g] | ((b->qh[g / 4] >> (2 * (g % 4))) & 3) << 8;
}

/* Grid index of group k (0..63, 4 weights each) of an IQ3_S block. */
static inline int quant_iq3s_index(const quant_block_iq3_s *b, int k) {
    return b->qs[k] | ((b->qh[k / 8] >> (k % 8)) & 1) << 8;
}

#endif
