/*
 * x86.h — inline helpers shared by the *_avx2.c and *_avx512.c kernels of
 * quant/ and kernels/ (include only from those files: they are built with
 * -mavx2 -mfma -mf16c -mbmi2, the AVX-512 ones with AVX-512 flags too, or
 * against tests/emu512.h).  Scalar code has its own twins in quant.c.
 *
 * exp8 uses fused multiply-adds by intrinsic; a file that turns contraction
 * off (ops_avx2.c) does so before including this header.
 */
#ifndef KILN_QUANT_X86_H
#define KILN_QUANT_X86_H

#include "quant/quant.h"

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* One IEEE half to float and back (F16C: exact, round to nearest even,
 * NaNs quieted with their top payload bits — the bits of quant_f16_to_f32 /
 * quant_f32_to_f16). */
static inline float h2f(uint16_t h) { return _cvtsh_ss(h); }
static inline uint16_t f2h(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }

/* 8 halves at p (unaligned) to 8 floats, and 8 floats rounded to halves. */
static inline __m256 load_h8(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
static inline void store_h8(uint16_t *p, __m256 v) {
    _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

/* Sum of the 8 lanes with s_l = x_l + x_(l+4): (s0 + s2) + (s1 + s3). */
static inline float hsum8(__m256 x) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* Largest of the 8 lanes. */
static inline float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* Sum of 4 doubles: (x0 + x2) + (x1 + x3). */
static inline double hsum4d(__m256d v) {
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    s = _mm_add_sd(s, _mm_unpackhi_pd(s, s));
    return _mm_cvtsd_f64(s);
}

/* e^x for 8 floats: x = k ln2 + r with |r| <= ln2/2 (ln2 split in two
 * parts so k ln2 is exact), e^r by a degree-6 polynomial, 2^k through the
 * exponent bits.  Inputs are clamped to [-87.3, 88.7] so 2^k stays a normal
 * float: e^x underflows to ~1e-38 instead of 0 and overflows to ~3e38
 * instead of inf, which neither SwiGLU's 1 / (1 + e^x) nor a softmax weight
 * beside the maximum's 1 notices.  kern_exp_attn (kernels/ops.c) is its
 * scalar twin. */
static inline __m256 exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.7f));
    const __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    /* k is in [-126, 128]; split as two halves so 2^k needs no inf/denormal */
    const __m256i ki = _mm256_cvtps_epi32(k);
    const __m256i k1 = _mm256_srai_epi32(ki, 1), k2 = _mm256_sub_epi32(ki, k1);
    const __m256 e1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, _mm256_set1_epi32(127)), 23));
    const __m256 e2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, _mm256_set1_epi32(127)), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, e1), e2);
}

/* Quantizes 32 floats to 32 int8 quants; returns the scale d and, when qsum
 * is not NULL, stores the sum of the quants (each SIMD level has its own). */
typedef float (*kx_q8_block_fn)(const float *x, int8_t *qs, int *qsum);

/* Q8_0 / Q8_1 activation rows (n a multiple of 32) through a level's block
 * quantizer: d (and Q8_1's s = d * sum) as halves, as the reference does. */
static inline __attribute__((always_inline)) void kx_q8_0_row(const float *x, quant_block_q8_0 *y, int64_t n,
                                                              kx_q8_block_fn block) {
    for (int64_t i = 0; i < n / 32; i++) y[i].d = f2h(block(x + i * 32, y[i].qs, NULL));
}

static inline __attribute__((always_inline)) void kx_q8_1_row(const float *x, quant_block_q8_1 *y, int64_t n,
                                                              kx_q8_block_fn block) {
    for (int64_t i = 0; i < n / 32; i++) {
        int sum;
        const float d = block(x + i * 32, y[i].qs, &sum);
        y[i].d = f2h(d);
        y[i].s = f2h((float)sum * d);
    }
}

#if defined(__AVX512F__) || defined(KILN_EMU512_H)
/* Sum of the 16 lanes: lanes l and l + 8 first, then as hsum8. */
static inline float hsum16(__m512 v) {
    return hsum8(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}
#endif

/* The 12-byte scale field of a Q4_K / Q5_K block as 16 bytes: the 8 scales,
 * then the 8 mins (6 bits each), the bytes quant_unpack_scales_k4 writes.
 * With the field as dwords a0, a1, a2: scales 0..3 = a0 & 0x3f.., 4..7 =
 * (a2 & 0x0f..) | (a0 >> 2 & 0x30..), mins 0..3 = a1 & 0x3f.., mins 4..7 =
 * (a2 >> 4 & 0x0f..) | (a1 >> 2 & 0x30..); nine vector steps instead of
 * about twenty scalar ones and the moves into a vector. */
static inline __m128i quant_scales_k4_x86(const uint8_t s[12]) {
    int32_t a2;
    memcpy(&a2, s + 8, 4);
    const __m128i v = _mm_insert_epi32(_mm_loadl_epi64((const __m128i *)s), a2, 2);
    const __m128i lo = _mm_and_si128(v, _mm_set1_epi8(0x3f)); /* dwords: o0, o2 */
    const __m128i a22 = _mm_srlv_epi32(_mm_shuffle_epi32(v, 0xAA), _mm_setr_epi32(0, 4, 0, 0));
    const __m128i hi = _mm_or_si128(_mm_and_si128(a22, _mm_set1_epi8(0x0f)),
                                    _mm_and_si128(_mm_srli_epi32(v, 2), _mm_set1_epi8(0x30))); /* o1, o3 */
    return _mm_unpacklo_epi32(lo, hi);
}

/* The 8 sub-block scales of an IQ4_XS block without their bias of 32, as
 * int16: scale j = (nibble j % 2 of sl[j / 2]) | (bits 2j, 2j + 1 of sh) << 4,
 * minus 32.  One unpack interleaves the low and high nibbles; a multiply by
 * 2^(14 - 2j) and a shift by 14 bring each lane's two top bits down.  Eleven
 * vector steps where the scalar extraction took about twelve per scale. */
static inline __m128i quant_iq4_xs_scales_x86(uint16_t sh, const uint8_t sl[4]) {
    int32_t l4;
    memcpy(&l4, sl, 4);
    const __m128i x = _mm_cvtsi32_si128(l4), m4 = _mm_set1_epi8(0x0F);
    const __m128i nib = _mm_unpacklo_epi8(_mm_and_si128(x, m4), _mm_and_si128(_mm_srli_epi16(x, 4), m4));
    const __m128i top =
        _mm_srli_epi16(_mm_mullo_epi16(_mm_set1_epi16((short)sh),
                                       _mm_setr_epi16(1 << 14, 1 << 12, 1 << 10, 1 << 8, 1 << 6, 1 << 4, 4, 1)),
                       14);
    return _mm_sub_epi16(_mm_or_si128(_mm_cvtepu8_epi16(nib), _mm_slli_epi16(top, 4)), _mm_set1_epi16(32));
}

#endif
