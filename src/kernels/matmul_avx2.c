/*
 * matmul_avx2.c — AVX2 tile kernels for prompt batches: 4 weight rows times
 * 4 activation rows per call (see kk_tile_fn in matmul.h), so each weight
 * block is unpacked once for 4 tokens and each activation block is loaded
 * once for 4 rows.
 *
 * Per 32-element block and (row, token) pair: maddubs (u8 x s8 -> s16
 * pairs) and madd with ones (-> 8 x s32).  The 4 rows of one token are then
 * folded by two rounds of hadd into one vector whose lanes 0..3 hold the
 * rows' sums over elements 0..15 and lanes 4..7 over 16..31 (exact int32:
 * at most 32 * 127 * 127).  One float fma per token and block applies the
 * scale products; the two halves are added at the end.
 */
#include "kernels/matmul.h"

#include "quant/quant.h"

#include <immintrin.h>

static inline __m256i fold4(__m256i p0, __m256i p1, __m256i p2, __m256i p3) {
    return _mm256_hadd_epi32(_mm256_hadd_epi32(p0, p1), _mm256_hadd_epi32(p2, p3));
}

static inline __m256i madd1(__m256i p16) { return _mm256_madd_epi16(p16, _mm256_set1_epi16(1)); }

/* The 4 rows' scales d (F16) of block b, repeated in both halves. */
#define ROW_SCALES(blk, b)                                                                       \
    _mm256_cvtph_ps(_mm_setr_epi16((short)blk[0][b].d, (short)blk[1][b].d, (short)blk[2][b].d, \
                                   (short)blk[3][b].d, (short)blk[0][b].d, (short)blk[1][b].d, \
                                   (short)blk[2][b].d, (short)blk[3][b].d))

static inline void store_tile(__m256 acc[4], float *y, int64_t ldy) {
    for (int t = 0; t < 4; t++) {
        const __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc[t]), _mm256_extractf128_ps(acc[t], 1));
        _mm_storeu_ps(y + t * ldy, s);
    }
}

static void tile_q8_0(int n, const void *w, size_t wrow, const void *a, size_t arow, float *y, int64_t ldy) {
    const kq_block_q8_0 *x[4], *q[4];
    for (int k = 0; k < 4; k++) {
        x[k] = (const kq_block_q8_0 *)((const uint8_t *)w + (size_t)k * wrow);
        q[k] = (const kq_block_q8_0 *)((const uint8_t *)a + (size_t)k * arow);
    }
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int b = 0; b < n / 32; b++) {
        __m256i xv[4], ax[4];
        for (int r = 0; r < 4; r++) {
            xv[r] = _mm256_loadu_si256((const __m256i *)x[r][b].qs);
            ax[r] = _mm256_abs_epi8(xv[r]);
        }
        const __m256 dx = ROW_SCALES(x, b);
        for (int t = 0; t < 4; t++) {
            /* |x| * (y with x's sign) keeps maddubs' unsigned operand unsigned */
            const __m256i yv = _mm256_loadu_si256((const __m256i *)q[t][b].qs);
            const __m256i s = fold4(madd1(_mm256_maddubs_epi16(ax[0], _mm256_sign_epi8(yv, xv[0]))),
                                    madd1(_mm256_maddubs_epi16(ax[1], _mm256_sign_epi8(yv, xv[1]))),
                                    madd1(_mm256_maddubs_epi16(ax[2], _mm256_sign_epi8(yv, xv[2]))),
                                    madd1(_mm256_maddubs_epi16(ax[3], _mm256_sign_epi8(yv, xv[3]))));
            const __m256 d = _mm256_mul_ps(dx, _mm256_set1_ps(_cvtsh_ss(q[t][b].d)));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), d, acc[t]);
        }
    }
    store_tile(acc, y, ldy);
}

static void tile_q4_0(int n, const void *w, size_t wrow, const void *a, size_t arow, float *y, int64_t ldy) {
    const kq_block_q4_0 *x[4];
    const kq_block_q8_0 *q[4];
    for (int k = 0; k < 4; k++) {
        x[k] = (const kq_block_q4_0 *)((const uint8_t *)w + (size_t)k * wrow);
        q[k] = (const kq_block_q8_0 *)((const uint8_t *)a + (size_t)k * arow);
    }
    const __m256i m4 = _mm256_set1_epi8(0x0F), eight = _mm256_set1_epi8(8);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int b = 0; b < n / 32; b++) {
        /* quants 0..15 in element order; the zero point 8 is taken off as
         * 8 * (sum of y) per half block */
        __m256i xv[4];
        for (int r = 0; r < 4; r++) {
            const __m128i v = _mm_loadu_si128((const __m128i *)x[r][b].qs);
            xv[r] = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), m4);
        }
        const __m256 dx = ROW_SCALES(x, b);
        for (int t = 0; t < 4; t++) {
            const __m256i yv = _mm256_loadu_si256((const __m256i *)q[t][b].qs);
            const __m256i o = madd1(_mm256_maddubs_epi16(eight, yv));
            const __m256i o2 = _mm256_hadd_epi32(o, o);
            __m256i s = fold4(madd1(_mm256_maddubs_epi16(xv[0], yv)), madd1(_mm256_maddubs_epi16(xv[1], yv)),
                              madd1(_mm256_maddubs_epi16(xv[2], yv)), madd1(_mm256_maddubs_epi16(xv[3], yv)));
            s = _mm256_sub_epi32(s, _mm256_hadd_epi32(o2, o2));
            const __m256 d = _mm256_mul_ps(dx, _mm256_set1_ps(_cvtsh_ss(q[t][b].d)));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), d, acc[t]);
        }
    }
    store_tile(acc, y, ldy);
}

kk_tile_fn kk_tile_avx2(int type) {
    switch (type) {
    case KQ_Q8_0: return tile_q8_0;
    case KQ_Q4_0: return tile_q4_0;
    default: return NULL;
    }
}
