/*
 * AVX2 twins of the K-quant / IQ4 dot kernels and of the Q8_K quantizer.
 * Compiled with -mavx2 -mfma -mf16c; only called when the CPU has them.
 *
 * Pattern of every dot: unsigned weight quants (u8) times signed activation
 * quants (s8) with maddubs -> s16 pairs, times the sub-block scale with
 * madd -> s32, summed per super-block, scaled by d (f32) into a float
 * accumulator vector that is reduced once at the end.  The offsets of
 * types with mins (or the -32 / -4 bias of signed types) are applied
 * through the Q8_K bsums rather than per element.
 */
#include <immintrin.h>
#include <string.h>

#include "kquants_layout.h"
#include "quant/x86.h"

/* The 8 scales and 8 mins of a Q4_K/Q5_K scale field as bytes:
 * lanes 0..7 scales, 8..15 mins. */
static inline __m128i unpack_scales_k4(const uint8_t s[12]) { return quant_scales_k4_x86(s); }

/* Sum over the 8 sub-blocks of min_j * (bsum 2j + bsum 2j+1), as 4 s32. */
static inline __m128i mins_dot(__m128i sm, const int16_t bsums[16]) {
    __m128i b0 = _mm_loadu_si128((const __m128i *)bsums);
    __m128i b1 = _mm_loadu_si128((const __m128i *)(bsums + 8));
    __m128i b32 = _mm_hadd_epi16(b0, b1); /* 8 sums of 32 */
    __m128i m16 = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
    return _mm_madd_epi16(m16, b32);
}

/* Decode reads each weight row once, rows back to back: fetching the
 * lines about 2 KB ahead keeps more of the memory stream in flight than
 * the hardware prefetcher alone (past the end of the matrix it is a no-op). */
#define PF_AHEAD 2048
/* always inlined: an out-of-line copy would be dropped as dead code
 * (see prefetch_row in kernels/ops_avx2.c) */
static inline __attribute__((always_inline)) void prefetch_block(const void *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)p + PF_AHEAD + o, _MM_HINT_T0);
}

/* int16 lane k of the 8 scales sc (both 128-bit halves alike) in every
 * lane: one vpshufb, where an extract and a broadcast took three steps. */
#define BCAST16(sc, k) _mm256_shuffle_epi8((sc), _mm256_set1_epi16((short)(0x0100 + 0x0202 * (k))))

static void q4_K_dot(int n, float *s, const void *vx, const void *vy) {
    const quant_block_q4_K *x = vx;
    const quant_block_q8_K *y = vy;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc = _mm256_setzero_ps();
    __m128 accm = _mm_setzero_ps();

    for (int i = 0; i < n / QUANT_QK_K; ++i) {
        prefetch_block(&x[i], sizeof x[i]);
        const float d = y[i].d * h2f(x[i].d);
        const float dmin = -y[i].d * h2f(x[i].dmin);
        const __m128i sm = unpack_scales_k4(x[i].scales);
        accm = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(mins_dot(sm, y[i].bsums)), accm);

        const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
        const uint8_t *q = x[i].qs;
        const int8_t *q8 = y[i].qs;
        __m256i sumi = _mm256_setzero_si256();
#define Q4K_STEP(g)                                                                                       \
    do {                                                                                                  \
        __m256i qb = _mm256_loadu_si256((const __m256i *)(q + 32 * (g)));                                 \
        __m256i lo = _mm256_and_si256(qb, m4);                                                            \
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qb, 4), m4);                                      \
        __m256i p0 = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(q8 + 64 * (g))));      \
        __m256i p1 = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(q8 + 64 * (g) + 32))); \
        p0 = _mm256_madd_epi16(p0, BCAST16(sc16, 2 * (g)));                                               \
        p1 = _mm256_madd_epi16(p1, BCAST16(sc16, 2 * (g) + 1));                                           \
        sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));                                          \
    } while (0)
        Q4K_STEP(0);
        Q4K_STEP(1);
        Q4K_STEP(2);
        Q4K_STEP(3);
#undef Q4K_STEP
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    accm = _mm_add_ps(accm, _mm_movehl_ps(accm, accm));
    accm = _mm_add_ss(accm, _mm_movehdup_ps(accm));
    *s = hsum8(acc) + _mm_cvtss_f32(accm);
}

static void q5_K_dot(int n, float *s, const void *vx, const void *vy) {
    const quant_block_q5_K *x = vx;
    const quant_block_q8_K *y = vy;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i bit4 = _mm256_set1_epi8(0x10);
    __m256 acc = _mm256_setzero_ps();
    __m128 accm = _mm_setzero_ps();

    for (int i = 0; i < n / QUANT_QK_K; ++i) {
        const float d = y[i].d * h2f(x[i].d);
        const float dmin = -y[i].d * h2f(x[i].dmin);
        const __m128i sm = unpack_scales_k4(x[i].scales);
        accm = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(mins_dot(sm, y[i].bsums)), accm);

        const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
        const uint8_t *q = x[i].qs;
        const int8_t *q8 = y[i].qs;
        /* Bit 2g of qh byte l -> weight 64g + l, bit 2g+1 -> 64g + 32 + l; the
         * shifts below move that bit to bit 4 of each byte. */
        const __m256i qh = _mm256_loadu_si256((const __m256i *)x[i].qh);
        __m256i sumi = _mm256_setzero_si256();
#define Q5K_STEP(g, hb0, hb1)                                                                                        \
    do {                                                                                                             \
        __m256i qb = _mm256_loadu_si256((const __m256i *)(q + 32 * (g)));                                            \
        __m256i lo = _mm256_or_si256(_mm256_and_si256(qb, m4), _mm256_and_si256((hb0), bit4));                       \
        __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qb, 4), m4), _mm256_and_si256((hb1), bit4)); \
        __m256i p0 = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(q8 + 64 * (g))));                 \
        __m256i p1 = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(q8 + 64 * (g) + 32)));            \
        p0 = _mm256_madd_epi16(p0, BCAST16(sc16, 2 * (g)));                                                          \
        p1 = _mm256_madd_epi16(p1, BCAST16(sc16, 2 * (g) + 1));                                                      \
        sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));                                                     \
    } while (0)
        Q5K_STEP(0, _mm256_slli_epi16(qh, 4), _mm256_slli_epi16(qh, 3));
        Q5K_STEP(1, _mm256_slli_epi16(qh, 2), _mm256_slli_epi16(qh, 1));
        Q5K_STEP(2, qh, _mm256_srli_epi16(qh, 1));
        Q5K_STEP(3, _mm256_srli_epi16(qh, 2), _mm256_srli_epi16(qh, 3));
#undef Q5K_STEP
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    accm = _mm_add_ps(accm, _mm_movehl_ps(accm, accm));
    accm = _mm_add_ss(accm, _mm_movehdup_ps(accm));
    *s = hsum8(acc) + _mm_cvtss_f32(accm);
}

/* Q6_K: quants used unsigned (0..63); the -32 bias becomes
 * -32 * sum_j sc_j * bsum_j, taken once per block. */
static void q6_K_dot(int n, float *s, const void *vx, const void *vy) {
    const quant_block_q6_K *x = vx;
    const quant_block_q8_K *y = vy;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i m2 = _mm256_set1_epi8(0x30);
    /* pshufb patterns spreading scale bytes 2k, 2k+1 over 8 bytes each. */
    const __m128i shuf[4] = {
        _mm_set_epi64x(0x0101010101010101, 0x0000000000000000),
        _mm_set_epi64x(0x0303030303030303, 0x0202020202020202),
        _mm_set_epi64x(0x0505050505050505, 0x0404040404040404),
        _mm_set_epi64x(0x0707070707070707, 0x0606060606060606),
    };
    __m256 acc = _mm256_setzero_ps();

    for (int i = 0; i < n / QUANT_QK_K; ++i) {
        prefetch_block(&x[i], sizeof x[i]);
        const float d = y[i].d * h2f(x[i].d);
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)x[i].scales);
        const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
        const __m256i bs = _mm256_loadu_si256((const __m256i *)y[i].bsums);
        __m256i sumi = _mm256_mullo_epi32(_mm256_madd_epi16(sc16, bs), _mm256_set1_epi32(-32));

        for (int h = 0; h < 2; ++h) {
            const uint8_t *ql = x[i].ql + 64 * h;
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(x[i].qh + 32 * h));
            const __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
            const __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            __m256i qv[4];
            qv[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m2));
            qv[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m2));
            qv[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(qh, m2));
            qv[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                    _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2));
            const __m128i sch = h ? _mm_srli_si128(sc8, 8) : sc8;
            for (int k = 0; k < 4; ++k) {
                __m256i yv = _mm256_loadu_si256((const __m256i *)(y[i].qs + 128 * h + 32 * k));
                __m256i p = _mm256_maddubs_epi16(qv[k], yv);
                __m128i scb = _mm_shuffle_epi8(sch, shuf[k]);
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, _mm256_cvtepi8_epi16(scb)));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = hsum8(acc);
}

/* Q3_K: low 2 bits | high bit << 2 gives 0..7 = quant + 4; the -4 bias is
 * applied as -4 * sum_j sc_j * bsum_j. */
static void q3_K_dot(int n, float *s, const void *vx, const void *vy) {
    const quant_block_q3_K *x = vx;
    const quant_block_q8_K *y = vy;
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m256i one = _mm256_set1_epi8(1);
    const __m128i shuf[4] = {
        _mm_set_epi64x(0x0101010101010101, 0x0000000000000000),
        _mm_set_epi64x(0x0303030303030303, 0x0202020202020202),
        _mm_set_epi64x(0x0505050505050505, 0x0404040404040404),
        _mm_set_epi64x(0x0707070707070707, 0x0606060606060606),
    };
    __m256 acc = _mm256_setzero_ps();

    for (int i = 0; i < n / QUANT_QK_K; ++i) {
        const float d = y[i].d * h2f(x[i].d);
        uint32_t o[4];
        quant_unpack_scales_q3(x[i].scales, o);
        const __m128i sc8 = _mm_sub_epi8(_mm_loadu_si128((const __m128i *)o), _mm_set1_epi8(32));
        const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
        const __m256i bs = _mm256_loadu_si256((const __m256i *)y[i].bsums);
        __m256i sumi = _mm256_mullo_epi32(_mm256_madd_epi16(sc16, bs), _mm256_set1_epi32(-4));

        const __m256i hm = _mm256_loadu_si256((const __m256i *)x[i].hmask);
        for (int h = 0; h < 2; ++h) {
            const __m256i qb = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
            const __m128i sch = h ? _mm_srli_si128(sc8, 8) : sc8;
            for (int k = 0; k < 4; ++k) {
                const int e = 4 * h + k; /* hmask bit of this 32-weight run */
                __m256i lo = _mm256_and_si256(_mm256_srli_epi16(qb, 2 * k), m3);
                __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hm, e), one);
                __m256i qv = _mm256_or_si256(lo, _mm256_slli_epi16(hb, 2));
                __m256i yv = _mm256_loadu_si256((const __m256i *)(y[i].qs + 128 * h + 32 * k));
                __m256i p = _mm256_maddubs_epi16(qv, yv);
                __m128i scb = _mm_shuffle_epi8(sch, shuf[k]);
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, _mm256_cvtepi8_epi16(scb)));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = hsum8(acc);
}

/* Q2_K: quants 0..3 times scales (low nibble); mins (high nibble) through
 * the bsums. */
static void q2_K_dot(int n, float *s, const void *vx, const void *vy) {
    const quant_block_q2_K *x = vx;
    const quant_block_q8_K *y = vy;
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m128i shuf[4] = {
        _mm_set_epi64x(0x0101010101010101, 0x0000000000000000),
        _mm_set_epi64x(0x0303030303030303, 0x0202020202020202),
        _mm_set_epi64x(0x0505050505050505, 0x0404040404040404),
        _mm_set_epi64x(0x0707070707070707, 0x0606060606060606),
    };
    __m256 acc = _mm256_setzero_ps();
    __m256 accm = _mm256_setzero_ps();

    for (int i = 0; i < n / QUANT_QK_K; ++i) {
        const float d = y[i].d * h2f(x[i].d);
        const float dmin = -y[i].d * h2f(x[i].dmin);
        const __m128i raw = _mm_loadu_si128((const __m128i *)x[i].scales);
        const __m128i sc8 = _mm_and_si128(raw, m4);
        const __m256i m16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), m4));
        const __m256i bs = _mm256_loadu_si256((const __m256i *)y[i].bsums);
        accm = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(_mm256_madd_epi16(m16, bs)), accm);

        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; ++h) {
            const __m256i qb = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
            const __m128i sch = h ? _mm_srli_si128(sc8, 8) : sc8;
            for (int k = 0; k < 4; ++k) {
                __m256i qv = _mm256_and_si256(_mm256_srli_epi16(qb, 2 * k), m3);
                __m256i yv = _mm256_loadu_si256((const __m256i *)(y[i].qs + 128 * h + 32 * k));
                __m256i p = _mm256_maddubs_epi16(qv, yv);
                __m128i scb = _mm_shuffle_epi8(sch, shuf[k]);
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, _mm256_cvtepu8_epi16(scb)));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = hsum8(_mm256_add_ps(acc, accm));
}

/* Code values of IQ4 nibbles via pshufb; the products are signed*signed,
 * done as |a| * sign(b, a) for maddubs. */
static inline __m256i iq4_lookup(__m256i nib) {
    const __m256i tbl = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)quant_iq4nl_values));
    return _mm256_shuffle_epi8(tbl, nib);
}

static inline __m256i dot_s8_pairs16(__m256i a, __m256i b) {
    return _mm256_maddubs_epi16(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}

static void iq4_xs_dot(int n, float *s, const void *vx, const void *vy) {
    const quant_block_iq4_xs *x = vx;
    const quant_block_q8_K *y = vy;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc = _mm256_setzero_ps();

    for (int i = 0; i < n / QUANT_QK_K; ++i) {
        const float d = y[i].d * h2f(x[i].d);
        const __m256i ls = _mm256_broadcastsi128_si256(quant_iq4_xs_scales_x86(x[i].scales_h, x[i].scales_l));
        __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int ib = 0; ib < 8; ib += 2) {
            /* Two sub-blocks: 32 bytes of nibbles, low 128 bits = ib. */
            __m256i qb = _mm256_loadu_si256((const __m256i *)(x[i].qs + 16 * ib));
            __m256i lo = _mm256_and_si256(qb, m4), hi = _mm256_and_si256(_mm256_srli_epi16(qb, 4), m4);
            /* Weights of sub-block ib: lo[0..15], hi[0..15]; of ib+1: lo/hi 16..31. */
            __m256i va = iq4_lookup(_mm256_permute2x128_si256(lo, hi, 0x20));
            __m256i vb = iq4_lookup(_mm256_permute2x128_si256(lo, hi, 0x31));
            __m256i ya = _mm256_loadu_si256((const __m256i *)(y[i].qs + 32 * ib));
            __m256i yb = _mm256_loadu_si256((const __m256i *)(y[i].qs + 32 * ib + 32));
            __m256i pa = _mm256_madd_epi16(dot_s8_pairs16(va, ya), BCAST16(ls, ib));
            __m256i pb = _mm256_madd_epi16(dot_s8_pairs16(vb, yb), BCAST16(ls, ib + 1));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pa, pb));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = hsum8(acc);
}

static void iq4_nl_dot(int n, float *s, const void *vx, const void *vy) {
    const quant_block_iq4_nl *x = vx;
    const quant_block_q8_0 *y = vy;
    const __m128i m4 = _mm_set1_epi8(0x0F);
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < n / QUANT_QK4_NL; ++i) {
        __m128i qb = _mm_loadu_si128((const __m128i *)x[i].qs);
        __m256i nib = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(qb, 4), m4), _mm_and_si128(qb, m4));
        __m256i v = iq4_lookup(nib);
        __m256i yv = _mm256_loadu_si256((const __m256i *)y[i].qs);
        __m256i p = _mm256_madd_epi16(dot_s8_pairs16(v, yv), _mm256_set1_epi16(1));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)), _mm256_cvtepi32_ps(p), acc);
    }
    *s = hsum8(acc);
}

/* Q8_K quantizer, same output as the scalar reference: the scale comes from
 * the first element of largest magnitude, rounding is to nearest-even
 * (the MXCSR default, as the reference's rounding trick). */
static void q8_K_quant(const float *x, void *vy, int64_t n) {
    quant_block_q8_K *y = vy;
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int64_t i = 0; i < n / QUANT_QK_K; ++i, x += QUANT_QK_K) {
        __m256 vmax = _mm256_setzero_ps();
        for (int e = 0; e < QUANT_QK_K; e += 8)
            vmax = _mm256_max_ps(vmax, _mm256_and_ps(_mm256_loadu_ps(x + e), absmask));
        __m128 m = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
        m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        m = _mm_max_ss(m, _mm_movehdup_ps(m));
        const float amax = _mm_cvtss_f32(m);
        if (!amax) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        float max = 0;
        const __m256 va = _mm256_set1_ps(amax);
        for (int e = 0; e < QUANT_QK_K; e += 8) {
            int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(x + e), absmask), va, _CMP_EQ_OQ));
            if (hit) {
                max = x[e + __builtin_ctz((unsigned)hit)];
                break;
            }
        }
        const float iscale = -127.f / max;
        const __m256 vs = _mm256_set1_ps(iscale);
        for (int e = 0; e < QUANT_QK_K; e += 32) {
            __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(vs, _mm256_loadu_ps(x + e)));
            __m256i b = _mm256_cvtps_epi32(_mm256_mul_ps(vs, _mm256_loadu_ps(x + e + 8)));
            __m256i c = _mm256_cvtps_epi32(_mm256_mul_ps(vs, _mm256_loadu_ps(x + e + 16)));
            __m256i dd = _mm256_cvtps_epi32(_mm256_mul_ps(vs, _mm256_loadu_ps(x + e + 24)));
            /* packs interleave 128-bit lanes; the permute restores order. */
            __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, dd);
            __m256i q = _mm256_packs_epi16(ab, cd);
            q = _mm256_permutevar8x32_epi32(q, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256((__m256i *)(y[i].qs + e), q);
            /* bsums of the two 16-runs of this 32. */
            __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), q);
            __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
            __m128i t = _mm_hadd_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
            t = _mm_hadd_epi32(t, t);
            y[i].bsums[e / 16] = (int16_t)_mm_extract_epi32(t, 0);
            y[i].bsums[e / 16 + 1] = (int16_t)_mm_extract_epi32(t, 1);
        }
        y[i].d = 1 / iscale;
    }
}

const quant_simd quant_kquants_avx2 = {
    .dot = {[QUANT_Q2_K] = q2_K_dot,
            [QUANT_Q3_K] = q3_K_dot,
            [QUANT_Q4_K] = q4_K_dot,
            [QUANT_Q5_K] = q5_K_dot,
            [QUANT_Q6_K] = q6_K_dot,
            [QUANT_IQ4_NL] = iq4_nl_dot,
            [QUANT_IQ4_XS] = iq4_xs_dot},
    .quant = {[QUANT_Q8_K] = q8_K_quant},
};
