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

/* F16 x F16 (F16 weights take F16 activations).  Each 8-element step
 * converts the 4 weight rows and the 4 activation rows once and does the
 * 16 products from registers; the scalar tail covers n % 8. */
static void tile_f16(int n, const void *w, size_t wrow, const void *a, size_t arow, float *y, int64_t ldy) {
    const uint16_t *x[4], *q[4];
    #pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        x[k] = (const uint16_t *)((const uint8_t *)w + (size_t)k * wrow);
        q[k] = (const uint16_t *)((const uint8_t *)a + (size_t)k * arow);
    }
    __m256 acc[4][4];
    #pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
        #pragma GCC unroll 4
        for (int t = 0; t < 4; t++) acc[r][t] = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
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
    for (int t = 0; t < 4; t++)
        for (int r = 0; r < 4; r++) {
            __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(acc[r][t]), _mm256_extractf128_ps(acc[r][t], 1));
            s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
            s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
            float sum = _mm_cvtss_f32(s4);
            for (int k = i; k < n; k++) sum += _cvtsh_ss(x[r][k]) * _cvtsh_ss(q[t][k]);
            y[t * ldy + r] = sum;
        }
}

kk_tile_fn kk_tile_avx2(int type) { return type == KQ_F16 ? tile_f16 : NULL; }
