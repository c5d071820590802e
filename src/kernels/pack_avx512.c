/*
 * pack_avx512.c — AVX-512 VNNI twins of the q4_0x8 and q8_0x8 kernels
 * (pack.h), for CPUs with F, BW, VL, DQ and VNNI.
 *
 * One zmm holds two 4-byte groups of all 8 rows: the 64 bytes at
 * qs + 64m are groups 2m (row i in lane i) and 2m + 1 (row i in lane 8 + i),
 * as packed.  The activation vector for the pair is the token's 32 quant
 * bytes with dword 2m broadcast to lanes 0..7 and 2m + 1 to lanes 8..15
 * (one vpermd of a 32-byte load).  vpdpbusd (unsigned weight bytes x signed
 * activation bytes, four products summed into each int32 lane) replaces the
 * AVX2 maddubs / 16-bit add / madd steps; the halves are added at the end,
 * so every row's block sum is the same integer as the scalar twin's and the
 * float step (one fma with the row scale times the token scale) is the
 * same operation: the results are equal bit for bit.
 *
 *   Q4_0: nibbles are 0..15; the zero point goes as s8 = 8 * sum(a).
 *   Q8_0: weights are signed and AVX-512 has no vpsignb, so w + 128 (an
 *         xor) is the unsigned operand and 128 * sum(a) = 16 * s8 comes off.
 */
#include "kernels/pack.h"

#include "quant/quant.h"

#include <immintrin.h>

/* as in pack_avx2.c: blocks of lookahead for the decode stream */
#define PF_BLOCKS 16

/* vpermd indices: dword lo of the activation to lanes 0..7, hi to 8..15 */
static inline __m512i pair_idx(int lo, int hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(lo)), _mm256_set1_epi32(hi), 1);
}

/* int32 lane i + lane 8 + i: the two groups' sums of row i */
static inline __m256i fold(__m512i s) {
    return _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
}

/* acc[8t .. 8t + 7] += (s - off) * dw * d, the scalar twin's fma */
static inline void finish(float *o, __m256i s, int32_t off, __m256 dw, float d) {
    s = _mm256_sub_epi32(s, _mm256_set1_epi32(off));
    const __m256 sc = _mm256_mul_ps(dw, _mm256_set1_ps(d));
    _mm256_storeu_ps(o, _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), sc, _mm256_loadu_ps(o)));
}

static void x8_q4_0(int nb, const void *vw, const void *va, size_t lda, int n_tok, float *acc) {
    const kk_q4_0x8 *w = vw;
    const kk_act8 *a = va;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    /* low nibbles of qs[0..63] are groups 0, 1 (elements 0..7); of
     * qs[64..127] groups 2, 3; the high nibbles elements 16.. (4..7) */
    const __m512i i01 = pair_idx(0, 1), i23 = pair_idx(2, 3), i45 = pair_idx(4, 5), i67 = pair_idx(6, 7);
    for (int b = 0; b < nb; b++) {
        const kk_q4_0x8 *wb = &w[b];
        _mm_prefetch((const char *)(wb + PF_BLOCKS), _MM_HINT_T0);
        _mm_prefetch((const char *)(wb + PF_BLOCKS) + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)(wb + PF_BLOCKS) + 128, _MM_HINT_T0);
        const __m512i p0 = _mm512_loadu_si512(wb->qs), p1 = _mm512_loadu_si512(wb->qs + 64);
        const __m512i w01 = _mm512_and_si512(p0, m4), w23 = _mm512_and_si512(p1, m4);
        const __m512i w45 = _mm512_and_si512(_mm512_srli_epi16(p0, 4), m4);
        const __m512i w67 = _mm512_and_si512(_mm512_srli_epi16(p1, 4), m4);
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wb->d));
        const kk_act8 *ab = a + (size_t)b * lda;
        for (int t = 0; t < n_tok; t++) {
            const __m512i y = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)ab[t].qs));
            __m512i s0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w01, _mm512_permutexvar_epi32(i01, y));
            __m512i s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w23, _mm512_permutexvar_epi32(i23, y));
            s0 = _mm512_dpbusd_epi32(s0, w45, _mm512_permutexvar_epi32(i45, y));
            s1 = _mm512_dpbusd_epi32(s1, w67, _mm512_permutexvar_epi32(i67, y));
            finish(acc + 8 * t, fold(_mm512_add_epi32(s0, s1)), ab[t].s8, dw, ab[t].d);
        }
    }
}

static void x8_q8_0(int nb, const void *vw, const void *va, size_t lda, int n_tok, float *acc) {
    const kk_q8_0x8 *w = vw;
    const kk_act8 *a = va;
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    const __m512i i01 = pair_idx(0, 1), i23 = pair_idx(2, 3), i45 = pair_idx(4, 5), i67 = pair_idx(6, 7);
    for (int b = 0; b < nb; b++) {
        const kk_q8_0x8 *wb = &w[b];
        for (size_t o = 0; o < sizeof *wb; o += 64) _mm_prefetch((const char *)(wb + 8) + o, _MM_HINT_T0);
        /* w + 128 as unsigned bytes */
        const __m512i u01 = _mm512_xor_si512(_mm512_loadu_si512(wb->qs), bias);
        const __m512i u23 = _mm512_xor_si512(_mm512_loadu_si512(wb->qs + 64), bias);
        const __m512i u45 = _mm512_xor_si512(_mm512_loadu_si512(wb->qs + 128), bias);
        const __m512i u67 = _mm512_xor_si512(_mm512_loadu_si512(wb->qs + 192), bias);
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wb->d));
        const kk_act8 *ab = a + (size_t)b * lda;
        for (int t = 0; t < n_tok; t++) {
            const __m512i y = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)ab[t].qs));
            __m512i s0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u01, _mm512_permutexvar_epi32(i01, y));
            __m512i s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u23, _mm512_permutexvar_epi32(i23, y));
            s0 = _mm512_dpbusd_epi32(s0, u45, _mm512_permutexvar_epi32(i45, y));
            s1 = _mm512_dpbusd_epi32(s1, u67, _mm512_permutexvar_epi32(i67, y));
            finish(acc + 8 * t, fold(_mm512_add_epi32(s0, s1)), 16 * ab[t].s8, dw, ab[t].d);
        }
    }
}

kk_x8_fn kk_x8_avx512(int t) {
    switch (t) {
    case KQ_Q4_0: return x8_q4_0;
    case KQ_Q8_0: return x8_q8_0;
    default: return NULL;
    }
}
