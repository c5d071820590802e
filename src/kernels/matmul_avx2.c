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
 *
 * The loops over the 4 rows / tokens are unrolled by pragma so their
 * arrays of vectors live in registers (-O2 would keep them on the stack).
 */
#include "kernels/matmul.h"

#include "quant/kquants_layout.h"
#include "quant/quant.h"

#include <immintrin.h>

static inline __m256i fold4(__m256i p0, __m256i p1, __m256i p2, __m256i p3) {
    return _mm256_hadd_epi32(_mm256_hadd_epi32(p0, p1), _mm256_hadd_epi32(p2, p3));
}

static inline __m256 dup128(__m128 v) { return _mm256_set_m128(v, v); }

static inline __m256i madd1(__m256i p16) { return _mm256_madd_epi16(p16, _mm256_set1_epi16(1)); }

/* The F16 scales d of block b of 4 rows as 4 floats: packed into one
 * 64-bit word with scalar ops (cheaper than 4 vector inserts). */
#define ROW_SCALES4(blk, b)                                                                      \
    _mm_cvtph_ps(_mm_cvtsi64_si128((long long)((uint64_t)blk[0][b].d | (uint64_t)blk[1][b].d << 16 | \
                                               (uint64_t)blk[2][b].d << 32 | (uint64_t)blk[3][b].d << 48)))
/* ... repeated in both halves of a vector (the lane order of fold4). */
#define ROW_SCALES(blk, b) dup128(ROW_SCALES4(blk, b))

static inline void store_tile(__m256 acc[4], float *y, int64_t ldy) {
    #pragma GCC unroll 4
    for (int t = 0; t < 4; t++) {
        const __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc[t]), _mm256_extractf128_ps(acc[t], 1));
        _mm_storeu_ps(y + t * ldy, s);
    }
}

static void tile_q8_0(int n, const void *w, size_t wrow, const void *a, size_t arow, float *y, int64_t ldy) {
    const kq_block_q8_0 *x[4], *q[4];
    #pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        x[k] = (const kq_block_q8_0 *)((const uint8_t *)w + (size_t)k * wrow);
        q[k] = (const kq_block_q8_0 *)((const uint8_t *)a + (size_t)k * arow);
    }
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int b = 0; b < n / 32; b++) {
        __m256i xv[4], ax[4];
        #pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            xv[r] = _mm256_loadu_si256((const __m256i *)x[r][b].qs);
            ax[r] = _mm256_abs_epi8(xv[r]);
        }
        const __m256 dx = ROW_SCALES(x, b);
        #pragma GCC unroll 4
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
    #pragma GCC unroll 4
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
        #pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            const __m128i v = _mm_loadu_si128((const __m128i *)x[r][b].qs);
            xv[r] = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), m4);
        }
        const __m256 dx = ROW_SCALES(x, b);
        #pragma GCC unroll 4
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

/* Q4_K x Q8_K.  Per 32-weight sub-block and token: the 4 rows' int32 sums
 * are folded as above, then multiplied by the rows' 6-bit sub-block scales
 * (lanes r and 4 + r hold row r) and summed over the super-block in int32
 * (at most 8 * 32 * 15 * 127 * 63).  The mins go through the Q8_K bsums:
 * per row and token sum_j min_j * (sum of the 32 y of sub-block j). */
static void tile_q4_K(int n, const void *w, size_t wrow, const void *a, size_t arow, float *y, int64_t ldy) {
    const kq_block_q4_K *x[4];
    const kq_block_q8_K *q[4];
    #pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        x[k] = (const kq_block_q4_K *)((const uint8_t *)w + (size_t)k * wrow);
        q[k] = (const kq_block_q8_K *)((const uint8_t *)a + (size_t)k * arow);
    }
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    __m128 accm[4] = {_mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps()};
    for (int b = 0; b < n / KQ_QK_K; b++) {
        uint32_t sm[4][4]; /* per row: scales 0..7, mins 0..7 as bytes */
        #pragma GCC unroll 4
        for (int r = 0; r < 4; r++) kq_unpack_scales_k4(x[r][b].scales, sm[r]);
        /* scale bytes transposed: byte 4j + r = scale of sub-block j, row r */
        const __m128i s01 = _mm_unpacklo_epi8(_mm_setr_epi32((int)sm[0][0], (int)sm[0][1], 0, 0),
                                              _mm_setr_epi32((int)sm[1][0], (int)sm[1][1], 0, 0));
        const __m128i s23 = _mm_unpacklo_epi8(_mm_setr_epi32((int)sm[2][0], (int)sm[2][1], 0, 0),
                                              _mm_setr_epi32((int)sm[3][0], (int)sm[3][1], 0, 0));
        uint32_t sct[8]; /* word j: the 4 rows' scale bytes of sub-block j */
        _mm_storeu_si128((__m128i *)sct, _mm_unpacklo_epi16(s01, s23));
        _mm_storeu_si128((__m128i *)(sct + 4), _mm_unpackhi_epi16(s01, s23));
        __m128i m16[4];
        #pragma GCC unroll 4
        for (int r = 0; r < 4; r++) m16[r] = _mm_cvtepu8_epi16(_mm_setr_epi32((int)sm[r][2], (int)sm[r][3], 0, 0));
        const __m128 dxr = _mm_cvtph_ps(_mm_setr_epi16((short)x[0][b].d, (short)x[1][b].d, (short)x[2][b].d,
                                                       (short)x[3][b].d, 0, 0, 0, 0));
        const __m128 dmr = _mm_cvtph_ps(_mm_setr_epi16((short)x[0][b].dmin, (short)x[1][b].dmin,
                                                       (short)x[2][b].dmin, (short)x[3][b].dmin, 0, 0, 0, 0));
        const __m256 dx = _mm256_set_m128(dxr, dxr);
        #pragma GCC unroll 4
        for (int t = 0; t < 4; t++) {
            const __m128i b32 = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)q[t][b].bsums),
                                               _mm_loadu_si128((const __m128i *)(q[t][b].bsums + 8)));
            const __m128i h = _mm_hadd_epi32(_mm_hadd_epi32(_mm_madd_epi16(m16[0], b32), _mm_madd_epi16(m16[1], b32)),
                                             _mm_hadd_epi32(_mm_madd_epi16(m16[2], b32), _mm_madd_epi16(m16[3], b32)));
            accm[t] = _mm_fmadd_ps(_mm_cvtepi32_ps(h), _mm_mul_ps(dmr, _mm_set1_ps(q[t][b].d)), accm[t]);
        }
        __m256i isum[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                           _mm256_setzero_si256()};
        #pragma GCC unroll 4
        for (int g = 0; g < 4; g++) {
            __m256i lo[4], hi[4];
            #pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                const __m256i qb = _mm256_loadu_si256((const __m256i *)(x[r][b].qs + 32 * g));
                lo[r] = _mm256_and_si256(qb, m4);
                hi[r] = _mm256_and_si256(_mm256_srli_epi16(qb, 4), m4);
            }
            const __m256i sc0 = _mm256_cvtepu8_epi32(_mm_set1_epi32((int)sct[2 * g]));
            const __m256i sc1 = _mm256_cvtepu8_epi32(_mm_set1_epi32((int)sct[2 * g + 1]));
            #pragma GCC unroll 4
            for (int t = 0; t < 4; t++) {
                const __m256i y0 = _mm256_loadu_si256((const __m256i *)(q[t][b].qs + 64 * g));
                const __m256i y1 = _mm256_loadu_si256((const __m256i *)(q[t][b].qs + 64 * g + 32));
                const __m256i f0 = fold4(madd1(_mm256_maddubs_epi16(lo[0], y0)), madd1(_mm256_maddubs_epi16(lo[1], y0)),
                                         madd1(_mm256_maddubs_epi16(lo[2], y0)), madd1(_mm256_maddubs_epi16(lo[3], y0)));
                const __m256i f1 = fold4(madd1(_mm256_maddubs_epi16(hi[0], y1)), madd1(_mm256_maddubs_epi16(hi[1], y1)),
                                         madd1(_mm256_maddubs_epi16(hi[2], y1)), madd1(_mm256_maddubs_epi16(hi[3], y1)));
                isum[t] = _mm256_add_epi32(isum[t], _mm256_add_epi32(_mm256_mullo_epi32(f0, sc0), _mm256_mullo_epi32(f1, sc1)));
            }
        }
        #pragma GCC unroll 4
        for (int t = 0; t < 4; t++)
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(dx, _mm256_set1_ps(q[t][b].d)), acc[t]);
    }
    #pragma GCC unroll 4
    for (int t = 0; t < 4; t++) {
        const __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc[t]), _mm256_extractf128_ps(acc[t], 1));
        _mm_storeu_ps(y + t * ldy, _mm_sub_ps(s, accm[t]));
    }
}

/* Q6_K x Q8_K.  Per 32-weight chunk and token: maddubs of the unsigned
 * 6-bit quants (0..63) with y, madd with the row's two 16-weight scales,
 * then the 4 rows folded as in the other tiles and summed over the
 * super-block in int32.  The -32 offset of every quant is taken off once
 * per block as 32 * sum_j scale_j * bsum_j (also folded), all exact in
 * int32 (at most 16 * 127 * 2048 * 32 before the offset). */
static void tile_q6_K(int n, const void *w, size_t wrow, const void *a, size_t arow, float *y, int64_t ldy) {
    const kq_block_q6_K *x[4];
    const kq_block_q8_K *q[4];
    #pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        x[k] = (const kq_block_q6_K *)((const uint8_t *)w + (size_t)k * wrow);
        q[k] = (const kq_block_q8_K *)((const uint8_t *)a + (size_t)k * arow);
    }
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x30);
    /* pshufb patterns spreading scale bytes 2k, 2k+1 over 8 bytes each */
    const __m128i shuf[4] = {
        _mm_set_epi64x(0x0101010101010101, 0x0000000000000000),
        _mm_set_epi64x(0x0303030303030303, 0x0202020202020202),
        _mm_set_epi64x(0x0505050505050505, 0x0404040404040404),
        _mm_set_epi64x(0x0707070707070707, 0x0606060606060606),
    };
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int b = 0; b < n / KQ_QK_K; b++) {
        __m256i isum[4];
        /* the offset: -32 * sum_j sc[r][j] * bsum[t][j], folded over rows */
        __m256i sc16[4];
        #pragma GCC unroll 4
        for (int r = 0; r < 4; r++) sc16[r] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[r][b].scales));
        #pragma GCC unroll 4
        for (int t = 0; t < 4; t++) {
            const __m256i bs = _mm256_loadu_si256((const __m256i *)q[t][b].bsums);
            const __m256i o = fold4(_mm256_madd_epi16(sc16[0], bs), _mm256_madd_epi16(sc16[1], bs),
                                    _mm256_madd_epi16(sc16[2], bs), _mm256_madd_epi16(sc16[3], bs));
            isum[t] = _mm256_mullo_epi32(o, _mm256_set1_epi32(-32));
        }
        for (int h = 0; h < 2; h++) {
            for (int k = 0; k < 4; k++) {
                __m256i qv[4], scv[4];
                #pragma GCC unroll 4
                for (int r = 0; r < 4; r++) {
                    const uint8_t *ql = x[r][b].ql + 64 * h + 32 * (k & 1);
                    const __m256i l = _mm256_loadu_si256((const __m256i *)ql);
                    const __m256i qh = _mm256_loadu_si256((const __m256i *)(x[r][b].qh + 32 * h));
                    /* low nibble for chunks 0, 1; high nibble for 2, 3; the
                     * top 2 bits sit at bits 2k..2k+1 of qh */
                    const __m256i lo = k < 2 ? _mm256_and_si256(l, m4) : _mm256_and_si256(_mm256_srli_epi16(l, 4), m4);
                    const __m256i hi = k == 0 ? _mm256_slli_epi16(qh, 4)
                                     : k == 1 ? _mm256_slli_epi16(qh, 2)
                                     : k == 2 ? qh
                                              : _mm256_srli_epi16(qh, 2);
                    qv[r] = _mm256_or_si256(lo, _mm256_and_si256(hi, m2));
                    const __m128i sc8 = _mm_loadu_si128((const __m128i *)x[r][b].scales);
                    const __m128i sch = h ? _mm_srli_si128(sc8, 8) : sc8;
                    scv[r] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sch, shuf[k]));
                }
                #pragma GCC unroll 4
                for (int t = 0; t < 4; t++) {
                    const __m256i yv = _mm256_loadu_si256((const __m256i *)(q[t][b].qs + 128 * h + 32 * k));
                    const __m256i f = fold4(_mm256_madd_epi16(_mm256_maddubs_epi16(qv[0], yv), scv[0]),
                                            _mm256_madd_epi16(_mm256_maddubs_epi16(qv[1], yv), scv[1]),
                                            _mm256_madd_epi16(_mm256_maddubs_epi16(qv[2], yv), scv[2]),
                                            _mm256_madd_epi16(_mm256_maddubs_epi16(qv[3], yv), scv[3]));
                    isum[t] = _mm256_add_epi32(isum[t], f);
                }
            }
        }
        const __m128 d4 = _mm_cvtph_ps(_mm_cvtsi64_si128((long long)((uint64_t)x[0][b].d | (uint64_t)x[1][b].d << 16 |
                                                                     (uint64_t)x[2][b].d << 32 | (uint64_t)x[3][b].d << 48)));
        const __m256 dx = dup128(d4);
        #pragma GCC unroll 4
        for (int t = 0; t < 4; t++)
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(dx, _mm256_set1_ps(q[t][b].d)), acc[t]);
    }
    store_tile(acc, y, ldy);
}

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

kk_tile_fn kk_tile_avx2(int type) {
    switch (type) {
    case KQ_F16: return tile_f16;
    case KQ_Q6_K: return tile_q6_K;
    case KQ_Q8_0: return tile_q8_0;
    case KQ_Q4_0: return tile_q4_0;
    case KQ_Q4_K: return tile_q4_K;
    default: return NULL;
    }
}
