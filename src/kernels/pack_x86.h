/*
 * pack_x86.h — the K-quant scale and offset terms that the AVX2 and AVX-512
 * interleaved kernels (pack_avx2.c, pack_avx512.c) compute alike: 256-bit,
 * one int32 per row lane of a packed super-block.  Included only by files
 * built with AVX2 (or wider) flags.
 */
#ifndef KILN_KERNELS_PACK_X86_H
#define KILN_KERNELS_PACK_X86_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* The scales of the sub-blocks at sc[0..7] and sc[8..15] (rows 0..7) as
 * 16-bit pairs (sc, sc) per row lane: scale_pairs_u8 for unsigned bytes
 * (Q4_K), zero-extended by the vpshufb; scale_pairs_s8 for signed ones
 * (Q6_K), moved to the high byte and shifted down with their sign. */
static inline void scale_pairs_u8(const uint8_t *sc, __m256i *lo, __m256i *hi) {
    const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)sc));
    const __m256i sl = _mm256_setr_epi8(0, -128, 0, -128, 1, -128, 1, -128, 2, -128, 2, -128, 3, -128, 3, -128, 4, -128,
                                        4, -128, 5, -128, 5, -128, 6, -128, 6, -128, 7, -128, 7, -128);
    *lo = _mm256_shuffle_epi8(v, sl);
    *hi = _mm256_shuffle_epi8(v, _mm256_add_epi8(sl, _mm256_set1_epi8(8)));
}

static inline void scale_pairs_s8(const int8_t *sc, __m256i *lo, __m256i *hi) {
    const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)sc));
    const __m256i sl = _mm256_setr_epi8(-128, 0, -128, 0, -128, 1, -128, 1, -128, 2, -128, 2, -128, 3, -128, 3, -128, 4,
                                        -128, 4, -128, 5, -128, 5, -128, 6, -128, 6, -128, 7, -128, 7);
    *lo = _mm256_srai_epi16(_mm256_shuffle_epi8(v, sl), 8);
    *hi = _mm256_srai_epi16(_mm256_shuffle_epi8(v, _mm256_add_epi8(sl, _mm256_set1_epi8(8))), 8);
}

/* The Q6_K scale pairs (sc_2p, sc_2p+1) per row lane, osc[p], for the
 * offset term against the 16-element sums: each pair of sub-blocks is one
 * 16-byte broadcast; vpshufb moves the bytes to the high byte of each
 * int16, an arithmetic shift brings them down with their sign. */
static inline void q6_K_offset_pairs(const int8_t *sc, __m256i osc[8]) {
    const __m256i so = _mm256_setr_epi8(-128, 0, -128, 8, -128, 1, -128, 9, -128, 2, -128, 10, -128, 3, -128, 11, -128,
                                        4, -128, 12, -128, 5, -128, 13, -128, 6, -128, 14, -128, 7, -128, 15);
#pragma GCC unroll 8
    for (int p = 0; p < 8; p++) {
        const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(sc + 16 * p)));
        osc[p] = _mm256_srai_epi16(_mm256_shuffle_epi8(v, so), 8);
    }
}

/* The Q6_K scales of a packed super-block as 16-bit pairs per row lane:
 * dsc[s] = (sc_s, sc_s) for the madd of sub-block s's sums, and the offset
 * pairs osc. */
static inline void q6_K_scale_pairs(const int8_t *sc, __m256i dsc[16], __m256i osc[8]) {
#pragma GCC unroll 8
    for (int p = 0; p < 8; p++) scale_pairs_s8(sc + 16 * p, &dsc[2 * p], &dsc[2 * p + 1]);
    q6_K_offset_pairs(sc, osc);
}

/* The -32 offset of the 8 rows' int32 sums: 32 * sum_s sc_s * bsums[s]. */
static inline __m256i q6_K_offset(const __m256i osc[8], const int16_t *bsums) {
    __m256i off = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int p = 0; p < 8; p++) {
        int32_t bs;
        memcpy(&bs, bsums + 2 * p, 4);
        off = _mm256_add_epi32(off, _mm256_madd_epi16(osc[p], _mm256_set1_epi32(bs)));
    }
    return _mm256_slli_epi32(off, 5);
}

/* A super-block's 32-element activation sums packed into 16-bit pairs and
 * broadcast: bp[p] holds (sum of sub-block 2p, of 2p + 1) in every dword
 * (from dwords 0, 1, 4, 5 of the packed sums). */
static inline void q4_K_bsum_pairs(const int16_t *bsums, __m256i bp[4]) {
    const __m256i s32 = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)bsums), _mm256_set1_epi16(1));
    const __m256i pk = _mm256_packs_epi32(s32, s32);
    static const int lane[4] = {0, 1, 4, 5};
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++) bp[p] = _mm256_permutevar8x32_epi32(pk, _mm256_set1_epi32(lane[p]));
}

/* The 8 rows' mins term sum_s mn[8 s + i] * (bsums[2 s] + bsums[2 s + 1])
 * of one super-block: the mins as 16-bit pairs per row lane against the
 * pairs of q4_K_bsum_pairs, one madd per pair of sub-blocks. */
static inline __m256i q4_K_mins_bp(const __m256i mnp[4], const __m256i bp[4]) {
    __m256i ms = _mm256_madd_epi16(mnp[0], bp[0]);
    ms = _mm256_add_epi32(ms, _mm256_madd_epi16(mnp[1], bp[1]));
    ms = _mm256_add_epi32(ms, _mm256_madd_epi16(mnp[2], bp[2]));
    return _mm256_add_epi32(ms, _mm256_madd_epi16(mnp[3], bp[3]));
}

static inline __m256i q4_K_mins_p(const __m256i mnp[4], const int16_t *bsums) {
    __m256i bp[4];
    q4_K_bsum_pairs(bsums, bp);
    return q4_K_mins_bp(mnp, bp);
}

/* mnp[p], per row lane: the mins of sub-blocks 2p and 2p + 1 as a 16-bit
 * pair: one 16-byte broadcast of both sub-blocks' mins (rows 0..7, then
 * 0..7) and a vpshufb that zero-extends them into place. */
static inline void q4_K_min_pairs(const uint8_t *mn, __m256i mnp[4]) {
    const __m256i sh = _mm256_setr_epi8(0, -128, 8, -128, 1, -128, 9, -128, 2, -128, 10, -128, 3, -128, 11, -128, 4,
                                        -128, 12, -128, 5, -128, 13, -128, 6, -128, 14, -128, 7, -128, 15, -128);
#pragma GCC unroll 4 /* rolled, gcc kept mnp on the stack */
    for (int p = 0; p < 4; p++)
        mnp[p] = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(mn + 16 * p))), sh);
}

static inline __m256i q4_K_mins(const uint8_t *mn, const int16_t *bsums) {
    __m256i mnp[4];
    q4_K_min_pairs(mn, mnp);
    return q4_K_mins_p(mnp, bsums);
}

/* A kern_x8_dec_fn NAME over the one-token kernel ONE(nb, const WT *w, const
 * AT *a, lda, float *acc) (accumulating into acc[0 .. 7]), which should be
 * inlined so its constants are set once for all the groups. */
#define KERN_X8_DEC(NAME, ONE, WT, AT)                                                     \
    static void NAME(int ng, int nb, const void *w, const void *a, size_t lda, float *y) { \
        for (int g = 0; g < ng; g++, y += 8) {                                             \
            _mm256_storeu_ps(y, _mm256_setzero_ps());                                      \
            ONE(nb, (const WT *)w + (size_t)g * (size_t)nb, (const AT *)a, lda, y);        \
        }                                                                                  \
    }

#endif
