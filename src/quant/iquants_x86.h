/*
 * iquants_x86.h — AVX2 helpers shared by iquants_avx2.c and
 * iquants_avx512.c (include only from those: they are built with AVX2
 * flags): each type's 32-weight run ib of a block unpacked to
 *     g      32 grid magnitudes (unsigned bytes, weight order)
 *     s      their signs, +1 or -1 per byte
 *     ls     the odd integer scales 2s + 1 of its two runs of 16
 * which is all the dots need: sum over j of g_j * sign_j * q8_j * ls.
 */
#ifndef KILN_IQUANTS_X86_H
#define KILN_IQUANTS_X86_H

#include <immintrin.h>
#include <string.h>

#include "iquants_layout.h"

typedef struct {
    __m256i g;
    __m256i s; /* +1 or -1 per weight */
    int16_t ls[2];
} quant_iq_run;

static inline uint32_t iqx_u32(const void *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* The four 8-weight groups' signs from their 7-bit codes. */
static inline __m256i iqx_units(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3) {
    const uint64_t *u = quant_iq_sign_units;
    return _mm256_set_epi64x((long long)u[c3], (long long)u[c2], (long long)u[c1], (long long)u[c0]);
}

/* The signs of 32 weights from 32 sign bits (bit j = weight j). */
static inline __m256i iqx_bits_units(uint32_t bits) {
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3,
                                            3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), spread), bit);
    return _mm256_or_si256(_mm256_cmpeq_epi8(v, bit), _mm256_set1_epi8(1));
}

static inline quant_iq_run iqx_run_iq2_xxs(const quant_block_iq2_xxs *b, int ib) {
    const uint32_t a = iqx_u32(b->qs + 4 * ib), c = iqx_u32(b->qs + 4 * ib + 2);
    const int16_t ls = (int16_t)(2 * (c >> 28) + 1);
    const uint64_t *G = quant_iq2xxs_grid;
    return (quant_iq_run){_mm256_set_epi64x((long long)G[a >> 24], (long long)G[(a >> 16) & 255],
                                            (long long)G[(a >> 8) & 255], (long long)G[a & 255]),
                          iqx_units(c & 127, (c >> 7) & 127, (c >> 14) & 127, (c >> 21) & 127),
                          {ls, ls}};
}

static inline quant_iq_run iqx_run_iq2_xs(const quant_block_iq2_xs *b, int ib) {
    const uint16_t *q = b->qs + 4 * ib;
    const uint64_t *G = quant_iq2xs_grid;
    return (quant_iq_run){_mm256_set_epi64x((long long)G[q[3] & 511], (long long)G[q[2] & 511],
                                            (long long)G[q[1] & 511], (long long)G[q[0] & 511]),
                          iqx_units(q[0] >> 9, q[1] >> 9, q[2] >> 9, q[3] >> 9),
                          {(int16_t)(2 * (b->scales[ib] & 15) + 1), (int16_t)(2 * (b->scales[ib] >> 4) + 1)}};
}

static inline quant_iq_run iqx_run_iq2_s(const quant_block_iq2_s *b, int ib) {
    const int g = 4 * ib;
    const uint64_t *G = quant_iq2s_grid;
    return (quant_iq_run){
        _mm256_set_epi64x((long long)G[quant_iq2s_index(b, g + 3)], (long long)G[quant_iq2s_index(b, g + 2)],
                          (long long)G[quant_iq2s_index(b, g + 1)], (long long)G[quant_iq2s_index(b, g)]),
        iqx_bits_units(iqx_u32(b->qs + QUANT_QK_K / 8 + g)),
        {(int16_t)(2 * (b->scales[ib] & 15) + 1), (int16_t)(2 * (b->scales[ib] >> 4) + 1)}};
}

static inline quant_iq_run iqx_run_iq3_xxs(const quant_block_iq3_xxs *b, int ib) {
    const uint8_t *q = b->qs + 8 * ib;
    const uint32_t c = iqx_u32(b->qs + QUANT_QK_K / 4 + 4 * ib);
    const int16_t ls = (int16_t)(2 * (c >> 28) + 1);
    const uint32_t *G = quant_iq3xxs_grid;
    return (quant_iq_run){_mm256_set_epi32((int)G[q[7]], (int)G[q[6]], (int)G[q[5]], (int)G[q[4]], (int)G[q[3]],
                                           (int)G[q[2]], (int)G[q[1]], (int)G[q[0]]),
                          iqx_units(c & 127, (c >> 7) & 127, (c >> 14) & 127, (c >> 21) & 127),
                          {ls, ls}};
}

static inline quant_iq_run iqx_run_iq3_s(const quant_block_iq3_s *b, int ib) {
    /* the 8 grid indices: qs bytes plus bit k of qh[ib] as bit 8 */
    const __m256i idx =
        _mm256_or_si256(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(b->qs + 8 * ib))),
                        _mm256_slli_epi32(_mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(b->qh[ib]),
                                                                             _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)),
                                                           _mm256_set1_epi32(1)),
                                          8));
    const int16_t ls = (int16_t)(2 * ((b->scales[ib / 2] >> (4 * (ib & 1))) & 15) + 1);
    return (quant_iq_run){_mm256_i32gather_epi32((const int *)quant_iq3s_grid, idx, 4),
                          iqx_bits_units(iqx_u32(b->signs + 4 * ib)),
                          {ls, ls}};
}

/* 16 int16 sums of adjacent products g_j * sign_j * q_j (exact: each
 * at most 2 * 62 * 128).  The signed grid value goes in the signed
 * operand of maddubs and |q| in the unsigned one, so q = -128 is exact. */
static inline __m256i iqx_products(quant_iq_run r, __m256i q) {
    const __m256i gs = _mm256_sign_epi8(r.g, r.s);
    return _mm256_maddubs_epi16(_mm256_abs_epi8(q), _mm256_sign_epi8(gs, q));
}

/* Sum of the 8 int32 lanes. */
static inline int iqx_hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

#endif
