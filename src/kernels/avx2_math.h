/* Inline AVX2 math shared by the *_avx2.c kernels (built with -mavx2 -mfma;
 * include only from those files). */
#ifndef KILN_AVX2_MATH_H
#define KILN_AVX2_MATH_H

#include <immintrin.h>

/* e^x for 8 floats: x = k ln2 + r with |r| <= ln2/2 (ln2 split in two
 * parts so k ln2 is exact), e^r by a degree-6 polynomial, 2^k through the
 * exponent bits.  Inputs are clamped to [-87.3, 88.7] so 2^k stays a normal
 * float: e^x underflows to ~1e-38 instead of 0 and overflows to ~3e38
 * instead of inf, which neither SwiGLU's 1 / (1 + e^x) nor a softmax weight
 * beside the maximum's 1 notices.  kk_exp_attn (ops.c) is its scalar twin. */
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

/* Sum of the 8 lanes: (x0 + x4) + (x1 + x5) + ... folded pairwise. */
static inline float hsum8(__m256 x) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

#endif
