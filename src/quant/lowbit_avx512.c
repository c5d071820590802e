/*
 * AVX-512 (F/BW/VL + VNNI) twins of the low-bit dot kernels in lowbit.c.
 * Compiled with AVX-512 flags; only called when the CPU and OS support
 * them.
 *
 * Same unsigned-weight forms as lowbit_avx2.c (which describes them).  The
 * ternary types and MXFP4 build 256-bit halves and join them so one 512-bit
 * VNNI dpbusd takes 64 weights u8 x s8 straight into int32; IQ1 stays at
 * 256 bits a sub-block (its grid lookups, not the arithmetic, set the pace)
 * with maddubs to int16 pairs and a 256-bit dpwssd times the scales.  The
 * TQ and IQ1 dots keep the reference's per-block float steps (bit for bit
 * equal to it); MXFP4 sums blocks in vector lanes.
 */
#include <immintrin.h>
#include <string.h>

/* The block sums are evaluated as the reference writes them: no product
 * and sum fused into one rounding (set before kiln's headers, so their
 * inline helpers are compiled alike and inline here). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#else
#pragma GCC optimize("fp-contract=off")
#endif

#include "lowbit_layout.h"
#include "quant/x86.h"

/* Two 256-bit halves into one 512-bit register (lo first). */
static inline __m512i join(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }

static inline __m512i load_y64(const int8_t *q) { return _mm512_loadu_si512(q); }

/* Sum of a Q8_K block's 256 quants, from its 16 bsums. */
static inline int bsum_total(const int16_t bsums[16]) {
    const __m256i v = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)bsums), _mm256_set1_epi16(1));
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* Sum of 8 int32 lanes. */
static inline int hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* ---- TQ1_0 ---- */

static inline __m256i mul3(__m256i v) { return _mm256_add_epi8(v, _mm256_add_epi8(v, v)); }
static inline __m128i mul3_128(__m128i v) { return _mm_add_epi8(v, _mm_add_epi8(v, v)); }

/* Top base-3 digit of each byte q, (3q) >> 8: with x = max(q - 1, 0),
 * avg(x, avg(x, 0)) >> 6 equals it for every byte (avg rounds up). */
static inline __m256i trit(__m256i q) {
    const __m256i x = _mm256_subs_epu8(q, _mm256_set1_epi8(1));
    const __m256i m = _mm256_avg_epu8(x, _mm256_avg_epu8(x, _mm256_setzero_si256()));
    return _mm256_and_si256(_mm256_srli_epi16(m, 6), _mm256_set1_epi8(3));
}

static void tq1_0_dot(int n, float *s, const void *vx, const void *vy) {
    const quant_block_tq1_0 *x = vx;
    const quant_block_q8_K *y = vy;
    float sum = 0;
    for (int i = 0; i < n / QUANT_QK_K; ++i) {
        __m256i t[8];
        __m256i q = _mm256_loadu_si256((const __m256i *)x[i].qs);
#pragma GCC unroll 5
        for (int k = 0; k < 5; ++k, q = mul3(q)) t[k] = trit(q);
        __m128i r[5];
        r[0] = _mm_loadu_si128((const __m128i *)(x[i].qs + 32));
#pragma GCC unroll 4
        for (int k = 1; k < 5; ++k) r[k] = mul3_128(r[k - 1]);
        uint32_t qh;
        memcpy(&qh, x[i].qh, sizeof qh);
        const __m128i h1 = _mm_set1_epi32((int)qh), h3 = mul3_128(h1), h9 = mul3_128(h3), h27 = mul3_128(h9);
        const __m128i h = _mm_blend_epi32(_mm_blend_epi32(h1, h3, 0x2), _mm_blend_epi32(h9, h27, 0x8), 0xC);
        t[5] = trit(_mm256_set_m128i(r[1], r[0]));
        t[6] = trit(_mm256_set_m128i(r[3], r[2]));
        t[7] = trit(_mm256_set_m128i(h, r[4]));
        __m512i acc = _mm512_setzero_si512();
        for (int k = 0; k < 4; ++k)
            acc = _mm512_dpbusd_epi32(acc, join(t[2 * k], t[2 * k + 1]), load_y64(y[i].qs + 64 * k));
        const int isum = _mm512_reduce_add_epi32(acc) - bsum_total(y[i].bsums);
        sum += (float)isum * (h2f(x[i].d) * y[i].d);
    }
    *s = sum;
}

/* ---- TQ2_0 ---- */

static void tq2_0_dot(int n, float *s, const void *vx, const void *vy) {
    const quant_block_tq2_0 *x = vx;
    const quant_block_q8_K *y = vy;
    const __m512i m3 = _mm512_set1_epi8(3);
    float sum = 0;
    for (int i = 0; i < n / QUANT_QK_K; ++i) {
        /* low half: weights 32l + m, high half: 128 + 32l + m */
        const __m512i qb = _mm512_loadu_si512(x[i].qs);
        __m512i acc = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int l = 0; l < 4; ++l) {
            const __m512i t = _mm512_and_si512(_mm512_srli_epi16(qb, 2 * l), m3);
            const __m512i yv = join(_mm256_loadu_si256((const __m256i *)(y[i].qs + 32 * l)),
                                    _mm256_loadu_si256((const __m256i *)(y[i].qs + 128 + 32 * l)));
            acc = _mm512_dpbusd_epi32(acc, t, yv);
        }
        const int isum = _mm512_reduce_add_epi32(acc) - bsum_total(y[i].bsums);
        const float d = y[i].d * h2f(x[i].d);
        sum += (float)isum * d;
    }
    *s = sum;
}

/* ---- IQ1_S, IQ1_M ---- */

/* Grid indices of a sub-block's four groups as 16-bit fields: the qs bytes
 * (4, little-endian) low, the 3-bit fields of h (group l at bit 3l) above. */
static inline uint64_t iq1_idx4(const uint8_t *qs, unsigned h) {
    uint32_t q;
    memcpy(&q, qs, sizeof q);
    return _pdep_u64(q, 0x00ff00ff00ff00ffull) | _pdep_u64(h, 0x0700070007000700ull);
}

/* The four grid groups of those indices, 8 int8 in {-1, 0, 1} each. */
static inline __m256i iq1_grid4(uint64_t ix) {
    return _mm256_set_epi64x((long long)quant_iq1s_grid[ix >> 48], (long long)quant_iq1s_grid[(ix >> 32) & 0xffff],
                             (long long)quant_iq1s_grid[(ix >> 16) & 0xffff], (long long)quant_iq1s_grid[ix & 0xffff]);
}

/* As lowbit_avx2.c: T = 8 sum ls P_b - sum ls S_b (8 - delta_b); 256-bit
 * steps (one sub-block each) with VNNI dpwssd for the scale products. */
/* sum over sub-blocks of ls_b S_b (8 - delta_b), S_b the sum of its y
 * (bsums 2b, 2b + 1), as int32 lanes (in the low 128 bits). */
static inline __m256i iq1s_off(const quant_block_iq1_s *x, const quant_block_q8_K *y) {
    const __m128i qh = _mm_loadu_si128((const __m128i *)x->qh);
    const __m128i f = _mm_and_si128(_mm_srli_epi16(qh, 12), _mm_set1_epi16(7));
    const __m128i ls = _mm_add_epi16(_mm_add_epi16(f, f), _mm_set1_epi16(1));
    const __m128i k = _mm_add_epi16(_mm_slli_epi16(_mm_srli_epi16(qh, 15), 1), _mm_set1_epi16(7));
    const __m128i sb =
        _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)y->bsums), _mm_loadu_si128((const __m128i *)(y->bsums + 8)));
    return _mm256_castsi128_si256(_mm_madd_epi16(_mm_mullo_epi16(ls, k), sb));
}

static void iq1_s_dot(int n, float *s, const void *vx, const void *vy) {
    const quant_block_iq1_s *x = vx;
    const quant_block_q8_K *y = vy;
    const __m256i one = _mm256_set1_epi8(1);
    float sum = 0;
    for (int i = 0; i < n / QUANT_QK_K; ++i) {
        __m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int b = 0; b < 8; ++b) {
            const unsigned h = x[i].qh[b];
            const int ls = 2 * ((h >> 12) & 7) + 1;
            const __m256i g = _mm256_add_epi8(iq1_grid4(iq1_idx4(x[i].qs + 4 * b, h)), one);
            const __m256i p = _mm256_maddubs_epi16(g, _mm256_loadu_si256((const __m256i *)(y[i].qs + 32 * b)));
            acc = _mm256_dpwssd_epi32(acc, p, _mm256_set1_epi16((short)ls));
        }
        const int t = hsum_i32(_mm256_sub_epi32(_mm256_slli_epi32(acc, 3), iq1s_off(&x[i], &y[i])));
        sum += h2f(x[i].d) * y[i].d * ((float)t * 0.125f);
    }
    *s = sum;
}

/* IQ1_M sub-block b: its four groups as 8g + 9 + 8 delta (unsigned 0..18;
 * the delta signs are bit 3 of each qh nibble). */
static inline __m256i iq1m_u(const quant_block_iq1_m *x, int b) {
    uint16_t hq;
    memcpy(&hq, x->qh + 2 * b, sizeof hq);
    uint32_t q;
    memcpy(&q, x->qs + 4 * b, sizeof q);
    const uint64_t ix = _pdep_u64(q, 0x00ff00ff00ff00ffull) | _pdep_u64(hq & 0x7777u, 0x0f000f000f000f00ull);
    const __m256i g = iq1_grid4(ix);
    const __m256i bit =
        _mm256_set_epi64x(0x8000800080008000ll, 0x0800080008000800ll, 0x0080008000800080ll, 0x0008000800080008ll);
    const __m256i neg = _mm256_cmpeq_epi16(_mm256_and_si256(_mm256_set1_epi16((short)hq), bit), bit);
    const __m256i dl = _mm256_andnot_si256(neg, _mm256_set1_epi8(2));
    return _mm256_add_epi8(_mm256_slli_epi16(_mm256_add_epi8(g, _mm256_set1_epi8(1)), 3), dl);
}

/* The 16 scale multipliers 2s + 1 of an IQ1_M block as int16, lane 2b + h
 * = sub-block b, groups 0-1 (h = 0) or 2-3 (h = 1): field 3 (j % 4) of
 * scale word j / 4, moved to the top by a multiply and shifted down. */
static inline __m256i iq1m_ls16(const quant_block_iq1_m *x) {
    uint64_t w;
    memcpy(&w, x->scales, sizeof w);
    const __m256i pick = _mm256_set_epi64x(0x0706070607060706ll, 0x0504050405040504ll, 0x0302030203020302ll,
                                           0x0100010001000100ll); /* word j / 4 into lane j, per 128 bits */
    const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi64x((long long)w), pick);
    const __m256i up = _mm256_set1_epi64x(0x0010008004002000ll); /* 2^(13 - 3 (j % 4)) */
    const __m256i f = _mm256_srli_epi16(_mm256_mullo_epi16(v, up), 13);
    return _mm256_add_epi16(_mm256_add_epi16(f, f), _mm256_set1_epi16(1));
}

static void iq1_m_dot(int n, float *s, const void *vx, const void *vy) {
    const quant_block_iq1_m *x = vx;
    const quant_block_q8_K *y = vy;
    /* a lane pair (ls1, ls2) spread: ls1 over the low 128 bits, ls2 the high */
    const __m256i spread =
        _mm256_set_epi64x(0x0302030203020302ll, 0x0302030203020302ll, 0x0100010001000100ll, 0x0100010001000100ll);
    float sum = 0;
    for (int i = 0; i < n / QUANT_QK_K; ++i) {
        const __m256i ls = iq1m_ls16(&x[i]);
        __m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int b = 0; b < 8; ++b) {
            const __m256i p =
                _mm256_maddubs_epi16(iq1m_u(&x[i], b), _mm256_loadu_si256((const __m256i *)(y[i].qs + 32 * b)));
            acc = _mm256_dpwssd_epi32(
                acc, p, _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(ls, _mm256_set1_epi32(b)), spread));
        }
        /* the 9 taken off: 9 sum ls * (sum of y) over the half sub-blocks */
        const __m256i off = _mm256_madd_epi16(ls, _mm256_loadu_si256((const __m256i *)y[i].bsums));
        const int t = hsum_i32(_mm256_sub_epi32(acc, _mm256_add_epi32(_mm256_slli_epi32(off, 3), off)));
        sum += h2f(quant_iq1m_d(&x[i])) * y[i].d * ((float)t * 0.125f);
    }
    *s = sum;
}

/* ---- MXFP4 ---- */

/* The 32 weights of a block as v + 12 (0..24), in weight order. */
static inline __m256i mxfp4_u(const quant_block_mxfp4 *x, __m256i tab) {
    const __m128i q = _mm_loadu_si128((const __m128i *)x->qs);
    const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0F));
    return _mm256_shuffle_epi8(tab, nib);
}

static void mxfp4_dot(int n, float *s, const void *vx, const void *vy) {
    const quant_block_mxfp4 *x = vx;
    const quant_block_q8_0 *y = vy;
    int8_t t16[16];
    for (int c = 0; c < 16; ++c) t16[c] = (int8_t)(quant_mxfp4_values[c] + 12);
    const __m256i tab = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)t16));
    const __m512i twelve = _mm512_set1_epi8(12);
    const int nb = n / QUANT_QK_MXFP4;
    __m512 acc = _mm512_setzero_ps();
    int i = 0;
    /* two blocks per step: int32 lanes 0..7 the first, 8..15 the second */
    for (; i + 1 < nb; i += 2) {
        const __m512i u = join(mxfp4_u(&x[i], tab), mxfp4_u(&x[i + 1], tab));
        const __m512i yv =
            join(_mm256_loadu_si256((const __m256i *)y[i].qs), _mm256_loadu_si256((const __m256i *)y[i + 1].qs));
        const __m512i p = _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), u, yv),
                                           _mm512_dpbusd_epi32(_mm512_setzero_si512(), twelve, yv));
        const __m512 d =
            _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(h2f(y[i].d) * quant_e8m0_half(x[i].e))),
                               _mm256_set1_ps(h2f(y[i + 1].d) * quant_e8m0_half(x[i + 1].e)), 1);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), d, acc);
    }
    float sum = hsum16(acc);
    if (i < nb) { /* the last odd block, as the reference does it */
        const __m256i yv = _mm256_loadu_si256((const __m256i *)y[i].qs);
        const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(mxfp4_u(&x[i], tab), yv),
                                           _mm256_maddubs_epi16(_mm256_set1_epi8(12), yv));
        int v[8];
        _mm256_storeu_si256((__m256i *)v, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
        const int isum = v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
        sum += h2f(y[i].d) * quant_e8m0_half(x[i].e) * (float)isum;
    }
    *s = sum;
}

const quant_simd quant_lowbit_avx512 = {
    .dot = {[QUANT_TQ1_0] = tq1_0_dot,
            [QUANT_TQ2_0] = tq2_0_dot,
            [QUANT_MXFP4] = mxfp4_dot,
            [QUANT_IQ1_S] = iq1_s_dot,
            [QUANT_IQ1_M] = iq1_m_dot},
};
