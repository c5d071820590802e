/*
 * pack_avx2.c — AVX2 twin of the q4_0x8 kernel (pack.h).
 *
 * Per weight block (8 rows x 32 elements): 4 loads give 8 vectors of
 * unsigned nibbles, vector k holding elements 4k..4k+3 of all 8 rows (one
 * row per 32-bit lane).  Per token: 8 x (broadcast 4 activation bytes,
 * maddubs, 16-bit add) — no lane crossing — then one madd to int32, the
 * zero-point term s8, and one fma with the 8 row scales times the token's
 * scale.  16-bit sums stay exact: 8 maddubs pairs of at most 2 * 15 * 127.
 */
#include "kernels/pack.h"

#include <immintrin.h>
#include <string.h>

static inline __m256i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* Decode streams the weights from memory once per token: prefetching
 * this many blocks (2.3 KB) ahead took one thread from 8.7 to 10-12 GB/s.
 * Groups of a matrix are contiguous, so the lookahead runs on into the
 * next group. */
#define PF_BLOCKS 16
/* One token (decode): the accumulator stays in a register. */
static void x8_q4_0_1(int nb, const kk_q4_0x8 *w, const kk_act8 *a, size_t lda, float *acc) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    __m256 sum = _mm256_loadu_ps(acc);
    for (int b = 0; b < nb; b++) {
        const kk_q4_0x8 *wb = &w[b];
        _mm_prefetch((const char *)(wb + PF_BLOCKS), _MM_HINT_T0);
        _mm_prefetch((const char *)(wb + PF_BLOCKS) + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)(wb + PF_BLOCKS) + 128, _MM_HINT_T0);
        const kk_act8 *ab = a + (size_t)b * lda;
        const int8_t *y = ab->qs;
        __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
        #pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const __m256i p = _mm256_loadu_si256((const __m256i *)(wb->qs + 32 * k));
            s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(_mm256_and_si256(p, m4), bcast4(y + 4 * k)));
            s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(p, 4), m4),
                                                            bcast4(y + 16 + 4 * k)));
        }
        __m256i s = _mm256_madd_epi16(_mm256_add_epi16(s0, s1), ones);
        s = _mm256_sub_epi32(s, _mm256_set1_epi32(ab->s8));
        const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wb->d)), _mm256_set1_ps(ab->d));
        sum = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), d, sum);
    }
    _mm256_storeu_ps(acc, sum);
}

static void x8_q4_0(int nb, const kk_q4_0x8 *w, const kk_act8 *a, size_t lda, int n_tok, float *acc) {
    if (n_tok == 1) {
        x8_q4_0_1(nb, w, a, lda, acc);
        return;
    }
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    for (int b = 0; b < nb; b++) {
        const kk_q4_0x8 *wb = &w[b];
        __m256i q[8];
        #pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const __m256i p = _mm256_loadu_si256((const __m256i *)(wb->qs + 32 * k));
            q[k] = _mm256_and_si256(p, m4);
            q[k + 4] = _mm256_and_si256(_mm256_srli_epi16(p, 4), m4);
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wb->d));
        const kk_act8 *ab = a + (size_t)b * lda;
        for (int t = 0; t < n_tok; t++) {
            const int8_t *y = ab[t].qs;
            __m256i s0 = _mm256_maddubs_epi16(q[0], bcast4(y + 0));
            __m256i s1 = _mm256_maddubs_epi16(q[1], bcast4(y + 4));
            s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(q[2], bcast4(y + 8)));
            s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(q[3], bcast4(y + 12)));
            s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(q[4], bcast4(y + 16)));
            s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(q[5], bcast4(y + 20)));
            s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(q[6], bcast4(y + 24)));
            s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(q[7], bcast4(y + 28)));
            __m256i s = _mm256_madd_epi16(_mm256_add_epi16(s0, s1), ones);
            s = _mm256_sub_epi32(s, _mm256_set1_epi32(ab[t].s8));
            const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(ab[t].d));
            float *o = acc + 8 * t;
            _mm256_storeu_ps(o, _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), d, _mm256_loadu_ps(o)));
        }
    }
}

kk_x8_fn kk_x8_q4_0_avx2(void) { return x8_q4_0; }
