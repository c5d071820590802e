/*
 * Block layouts of the K-quant and IQ4 types, byte for byte as GGUF files
 * store them (little-endian; f16 fields are IEEE half bit patterns).  Shared
 * by kquants.c and its SIMD twins; private to the quant folder.
 *
 * All K-quant super-blocks hold QUANT_QK_K = 256 weights.  Sub-block scales are
 * small unsigned integers multiplied by the f16 super-block scale d (and mins
 * by dmin); the quant q of a weight gives  w = d*sc*q - dmin*m  (types with
 * mins) or  w = d*sc*(q - offset)  (symmetric types).
 */
#ifndef KILN_KQUANTS_LAYOUT_H
#define KILN_KQUANTS_LAYOUT_H

#include <stdint.h>
#include <string.h>

#include "quant.h"

#define QUANT_QK_K 256
#define QUANT_QK8_0 32
#define QUANT_QK4_NL 32

/* 2.625 bits/weight.  16 sub-blocks of 16; scales[j] = sc | m << 4 (4 bits
 * each).  qs: 2-bit quants; byte l of 32-byte group g holds weights
 * 128*g + l + 32*k in bits 2k..2k+1, k = 0..3. */
typedef struct {
    uint8_t scales[QUANT_QK_K / 16];
    uint8_t qs[QUANT_QK_K / 4];
    uint16_t d;
    uint16_t dmin;
} quant_block_q2_K;

/* 3.4375 bits/weight.  Quant = low 2 bits (qs, packed as in Q2_K) plus a high
 * bit in hmask (bit k of hmask[l] belongs to weight 32*k + l); the stored
 * value minus 4 is the signed quant, so a clear high bit means "subtract 4".
 * scales: 16 6-bit values biased by 32: low nibbles in bytes 0..7 (sub-block
 * j < 8 in the low nibble of byte j, j >= 8 in the high nibble of byte j-8),
 * top 2 bits in bytes 8..11 (sub-block j in bits 2*(j/4) of byte 8 + j%4). */
typedef struct {
    uint8_t hmask[QUANT_QK_K / 8];
    uint8_t qs[QUANT_QK_K / 4];
    uint8_t scales[12];
    uint16_t d;
} quant_block_q3_K;

/* 4.5 bits/weight.  8 sub-blocks of 32, 6-bit scale and 6-bit min each,
 * packed in 12 bytes (see quant_scale_min_k4).  qs: 32-byte group g holds
 * weights 64*g + l (low nibble) and 64*g + 32 + l (high nibble). */
typedef struct {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qs[QUANT_QK_K / 2];
} quant_block_q4_K;

/* 5.5 bits/weight.  As Q4_K plus a fifth bit: bit 2g of qh[l] belongs to
 * weight 64*g + l, bit 2g+1 to weight 64*g + 32 + l. */
typedef struct {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qh[QUANT_QK_K / 8];
    uint8_t qs[QUANT_QK_K / 2];
} quant_block_q5_K;

/* 6.5625 bits/weight.  16 sub-blocks of 16 with int8 scales; quant q in
 * 0..63, weight = d*scales[j]*(q - 32).  Per 128-weight half h: ql bytes
 * 64h + l hold weights 128h + l (low nibble) and 128h + 64 + l (high
 * nibble), ql 64h + 32 + l hold 128h + 32 + l and 128h + 96 + l; qh byte
 * 32h + l holds the top 2 bits of weights 128h + l + 32k in bits 2k..2k+1. */
typedef struct {
    uint8_t ql[QUANT_QK_K / 2];
    uint8_t qh[QUANT_QK_K / 4];
    int8_t scales[QUANT_QK_K / 16];
    uint16_t d;
} quant_block_q6_K;

/* Activation type of the K-quant dots: f32 scale, 256 int8, and the sums of
 * each 16 consecutive quants (lets the mins be applied without the quants). */
typedef struct {
    float d;
    int8_t qs[QUANT_QK_K];
    int16_t bsums[QUANT_QK_K / 16];
} quant_block_q8_K;

/* IQ4_NL's activation type Q8_0 (quant_block_q8_0) comes from quant.h. */

/* 4.5 bits/weight, non-linear: nibbles index quant_iq4nl_values.  qs byte l
 * holds weight l (low nibble) and weight 16 + l (high nibble). */
typedef struct {
    uint16_t d;
    uint8_t qs[QUANT_QK4_NL / 2];
} quant_block_iq4_nl;

/* 4.25 bits/weight: IQ4_NL codes in 8 sub-blocks of 32 (nibble layout of
 * IQ4_NL per sub-block) with 6-bit scales biased by 32: low 4 bits in
 * scales_l (sub-block j in nibble j%2 of byte j/2), top 2 bits in scales_h
 * bits 2j..2j+1. */
typedef struct {
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[QUANT_QK_K / 64];
    uint8_t qs[QUANT_QK_K / 2];
} quant_block_iq4_xs;

_Static_assert(sizeof(quant_block_q2_K) == 84, "Q2_K block size");
_Static_assert(sizeof(quant_block_q3_K) == 110, "Q3_K block size");
_Static_assert(sizeof(quant_block_q4_K) == 144, "Q4_K block size");
_Static_assert(sizeof(quant_block_q5_K) == 176, "Q5_K block size");
_Static_assert(sizeof(quant_block_q6_K) == 210, "Q6_K block size");
_Static_assert(sizeof(quant_block_q8_K) == 292, "Q8_K block size");
_Static_assert(sizeof(quant_block_iq4_nl) == 18, "IQ4_NL block size");
_Static_assert(sizeof(quant_block_iq4_xs) == 136, "IQ4_XS block size");

/* The 16 IQ4_NL code values (part of the format). */
static const int8_t quant_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* Sub-block j (0..7) of the 12-byte Q4_K/Q5_K scale field: j < 4 keep their
 * 6-bit scale and min in bytes j and j+4; j >= 4 keep the low 4 bits in the
 * nibbles of byte j+4 and the top 2 bits in bits 6..7 of bytes j-4 (scale)
 * and j (min). */
static inline void quant_scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* The 12-byte Q4_K/Q5_K scale field expanded to bytes, four per word:
 * o[0..1] = scales of sub-blocks 0..7, o[2..3] = mins of 0..7. */
static inline void quant_unpack_scales_k4(const uint8_t s[12], uint32_t o[4]) {
    uint32_t a[3];
    memcpy(a, s, 12);
    o[0] = a[0] & 0x3f3f3f3f;
    o[1] = (a[2] & 0x0f0f0f0f) | ((a[0] >> 6) & 0x03030303) << 4;
    o[2] = a[1] & 0x3f3f3f3f;
    o[3] = ((a[2] >> 4) & 0x0f0f0f0f) | ((a[1] >> 6) & 0x03030303) << 4;
}

/* The 12-byte Q3_K scale field expanded to 16 bytes, still biased by 32. */
static inline void quant_unpack_scales_q3(const uint8_t s[12], uint32_t o[4]) {
    uint32_t a[3];
    memcpy(a, s, 12);
    o[0] = (a[0] & 0x0f0f0f0f) | (a[2] & 0x03030303) << 4;
    o[1] = (a[1] & 0x0f0f0f0f) | ((a[2] >> 2) & 0x03030303) << 4;
    o[2] = ((a[0] >> 4) & 0x0f0f0f0f) | ((a[2] >> 4) & 0x03030303) << 4;
    o[3] = ((a[1] >> 4) & 0x0f0f0f0f) | ((a[2] >> 6) & 0x03030303) << 4;
}

#endif
