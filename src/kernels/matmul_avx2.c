/*
 * matmul_avx2.c — the AVX2 tile kernel for F16 prompt batches: 4 weight
 * rows times 4 activation rows per call (see kk_tile_fn in matmul.h), so
 * each weight vector is converted once for 4 tokens and each activation
 * vector once for 4 rows.  The quantized types with an interleaved form
 * (kernels/pack.h) take batches through it instead of tiles.
 *
 * The loops over the 4 rows / tokens are unrolled by pragma so their
 * arrays of vectors live in registers (-O2 would keep them on the stack).
 */
#include "kernels/matmul.h"

#include "quant/quant.h"

#include <immintrin.h>

/* acc[r][t] += weight row r times activation row t, elements i .. i + 8. */
static inline __attribute__((always_inline)) void f16_step(__m256 acc[4][4], const uint16_t *const x[4],
                                                           const uint16_t *const q[4], int i) {
    __m256 av[4];
    #pragma GCC unroll 4
    for (int t = 0; t < 4; t++) av[t] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(q[t] + i)));
    #pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        const __m256 wv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x[r] + i)));
        #pragma GCC unroll 4
        for (int t = 0; t < 4; t++) acc[r][t] = _mm256_fmadd_ps(wv, av[t], acc[r][t]);
    }
}

/* F16 x F16 (F16 weights take F16 activations).  Each 8-element step
 * converts the 4 weight rows and the 4 activation rows once and does the
 * 16 products from registers.
 *
 * Every output is the very float the AVX2 vec_dot (dot_f16 in
 * quant/legacy_avx2.c) gives for its row and token, so a token gets the
 * same bits in a prompt batch, a verify batch of speculative decoding or
 * alone: that dot keeps 4 accumulators, lane group k of each 32-element
 * block going to accumulator k, the leftover 8-element groups to the
 * first, then sums them as (a0 + a1) + (a2 + a3) and adds the n % 8 tail
 * in scalar.  The tile runs one pass per accumulator (16 of them live in
 * registers per pass; the 4 x 4 rows stay in L1 between passes) and
 * combines them the same way. */
static void tile_f16(int n, const void *w, size_t wrow, const void *a, size_t arow, float *y, int64_t ldy) {
    const uint16_t *x[4], *q[4];
    #pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        x[k] = (const uint16_t *)((const uint8_t *)w + (size_t)k * wrow);
        q[k] = (const uint16_t *)((const uint8_t *)a + (size_t)k * arow);
    }
    const int n32 = n & ~31;
    int end8 = n32; /* where the 8-element groups end */
    while (end8 + 8 <= n) end8 += 8;
    __m256 part[4][4][4]; /* [accumulator][row][token] */
    for (int k = 0; k < 4; k++) {
        __m256 acc[4][4];
        #pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
            #pragma GCC unroll 4
            for (int t = 0; t < 4; t++) acc[r][t] = _mm256_setzero_ps();
        /* accumulator k takes group k of every 32-block, and accumulator 0
         * the leftover groups after them */
        for (int i = 8 * k; i < n32; i += 32) f16_step(acc, x, q, i);
        if (k == 0)
            for (int i = n32; i < end8; i += 8) f16_step(acc, x, q, i);
        #pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
            #pragma GCC unroll 4
            for (int t = 0; t < 4; t++) part[k][r][t] = acc[r][t];
    }
    for (int t = 0; t < 4; t++)
        for (int r = 0; r < 4; r++) {
            const __m256 v = _mm256_add_ps(_mm256_add_ps(part[0][r][t], part[1][r][t]),
                                           _mm256_add_ps(part[2][r][t], part[3][r][t]));
            __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
            s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
            s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
            float sum = _mm_cvtss_f32(s4);
            for (int i = end8; i < n; i++) sum += _cvtsh_ss(x[r][i]) * _cvtsh_ss(q[t][i]);
            y[t * ldy + r] = sum;
        }
}

kk_tile_fn kk_tile_avx2(int type) { return type == KQ_F16 ? tile_f16 : NULL; }
