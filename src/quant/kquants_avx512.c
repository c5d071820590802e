/*
 * AVX-512 (F/BW/VL + VNNI) twins of the K-quant / IQ4 dot kernels and of the
 * Q8_K quantizer.  Compiled with AVX-512 flags; only called when the CPU
 * and OS support them.
 *
 * Each 512-bit step covers 64 weights: u8 quants x s8 activations with
 * maddubs -> 32 s16 lanes (8 lanes per 16-weight run), then VNNI dpwssd
 * multiplies by a per-lane s16 scale vector and accumulates in s32.  The
 * scale vector comes from one permute of the block's scales.  Biases and
 * mins go through the Q8_K bsums; d scales the block sum into a float
 * accumulator reduced once at the end.
 */
#include <immintrin.h>
#include <string.h>

#include "kquants_layout.h"
#include "quant/x86.h"

/* Index vector for permutexvar_epi16: lane i -> base + i/width. */
static inline __m512i run_index(int base, int width) {
    int16_t idx[32];
    for (int i = 0; i < 32; ++i) idx[i] = (int16_t)(base + i / width);
    return _mm512_loadu_si512(idx);
}

/* Two 256-bit halves into one 512-bit register (lo first). */
static inline __m512i join(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }

/* Mins term of Q4_K/Q5_K: sum_j m_j * (bsum 2j + bsum 2j+1), as 4 s32. */
static inline __m128i mins_dot(const uint32_t o[4], const int16_t bsums[16]) {
    __m128i b0 = _mm_loadu_si128((const __m128i *)bsums);
    __m128i b1 = _mm_loadu_si128((const __m128i *)(bsums + 8));
    __m128i m16 = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(o + 2)));
    return _mm_madd_epi16(m16, _mm_hadd_epi16(b0, b1));
}

static void q4_K_dot(int n, float *s, const void *vx, const void *vy) {
    const quant_block_q4_K *x = vx;
    const quant_block_q8_K *y = vy;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i idx0 = run_index(0, 16);
    const __m512i two = _mm512_set1_epi16(2);
    __m512 acc = _mm512_setzero_ps();
    __m128 accm = _mm_setzero_ps();

    for (int i = 0; i < n / QUANT_QK_K; ++i) {
        const float d = y[i].d * h2f(x[i].d);
        const float dmin = -y[i].d * h2f(x[i].dmin);
        uint32_t o[4];
        _mm_storeu_si128((__m128i *)o, quant_scales_k4_x86(x[i].scales));
        accm = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(mins_dot(o, y[i].bsums)), accm);

        const __m512i sc = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)o)));
        __m512i idx = idx0;
        __m512i sumi = _mm512_setzero_si512();
        for (int g = 0; g < 4; ++g) {
            /* Low nibbles = weights 64g..+31, high = 64g+32..+63. */
            __m256i qb = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * g));
            __m512i q = _mm512_and_si512(join(qb, _mm256_srli_epi16(qb, 4)), m4);
            __m512i p = _mm512_maddubs_epi16(q, _mm512_loadu_si512(y[i].qs + 64 * g));
            sumi = _mm512_dpwssd_epi32(sumi, p, _mm512_permutexvar_epi16(idx, sc));
            idx = _mm512_add_epi16(idx, two);
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
    }
    accm = _mm_add_ps(accm, _mm_movehl_ps(accm, accm));
    accm = _mm_add_ss(accm, _mm_movehdup_ps(accm));
    *s = _mm512_reduce_add_ps(acc) + _mm_cvtss_f32(accm);
}

static void q5_K_dot(int n, float *s, const void *vx, const void *vy) {
    const quant_block_q5_K *x = vx;
    const quant_block_q8_K *y = vy;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i bit4 = _mm512_set1_epi8(0x10);
    const __m512i idx0 = run_index(0, 16);
    const __m512i two = _mm512_set1_epi16(2);
    __m512 acc = _mm512_setzero_ps();
    __m128 accm = _mm_setzero_ps();

    for (int i = 0; i < n / QUANT_QK_K; ++i) {
        const float d = y[i].d * h2f(x[i].d);
        const float dmin = -y[i].d * h2f(x[i].dmin);
        uint32_t o[4];
        _mm_storeu_si128((__m128i *)o, quant_scales_k4_x86(x[i].scales));
        accm = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(mins_dot(o, y[i].bsums)), accm);

        const __m512i sc = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)o)));
        /* Fifth bits: qh bit 2g (low half) and 2g+1 (high half, pre-shifted
         * down by one) both sit at bit 2g; moved to bit 4 below. */
        const __m256i qh = _mm256_loadu_si256((const __m256i *)x[i].qh);
        const __m512i hz = join(qh, _mm256_srli_epi16(qh, 1));
        const __m512i hb[4] = {_mm512_slli_epi16(hz, 4), _mm512_slli_epi16(hz, 2), hz, _mm512_srli_epi16(hz, 2)};
        __m512i idx = idx0;
        __m512i sumi = _mm512_setzero_si512();
        for (int g = 0; g < 4; ++g) {
            __m256i qb = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * g));
            __m512i q = _mm512_and_si512(join(qb, _mm256_srli_epi16(qb, 4)), m4);
            q = _mm512_or_si512(q, _mm512_and_si512(hb[g], bit4));
            __m512i p = _mm512_maddubs_epi16(q, _mm512_loadu_si512(y[i].qs + 64 * g));
            sumi = _mm512_dpwssd_epi32(sumi, p, _mm512_permutexvar_epi16(idx, sc));
            idx = _mm512_add_epi16(idx, two);
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
    }
    accm = _mm_add_ps(accm, _mm_movehl_ps(accm, accm));
    accm = _mm_add_ss(accm, _mm_movehdup_ps(accm));
    *s = _mm512_reduce_add_ps(acc) + _mm_cvtss_f32(accm);
}

/* Q6_K: quants used unsigned (0..63), the -32 bias applied once per block
 * as -32 * sum_j sc_j * bsum_j. */
static void q6_K_dot(int n, float *s, const void *vx, const void *vy) {
    const quant_block_q6_K *x = vx;
    const quant_block_q8_K *y = vy;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i m2 = _mm512_set1_epi8(0x30);
    const __m512i idx0 = run_index(0, 8);
    const __m512i four = _mm512_set1_epi16(4);
    __m512 acc = _mm512_setzero_ps();

    for (int i = 0; i < n / QUANT_QK_K; ++i) {
        const float d = y[i].d * h2f(x[i].d);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[i].scales));
        const __m256i bs = _mm256_loadu_si256((const __m256i *)y[i].bsums);
        const __m256i bias = _mm256_slli_epi32(_mm256_madd_epi16(sc16, bs), 5);
        __m512i sumi = _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), bias));
        const __m512i sc = _mm512_castsi256_si512(sc16);
        __m512i idx = idx0;

        for (int h = 0; h < 2; ++h) {
            /* ql bytes 64h..64h+63: low nibbles = weights 128h + 0..63, high
             * nibbles = 128h + 64..127; qh byte l carries bit pairs for
             * weights 128h + l + 32k, k = 0..3. */
            const __m512i ql = _mm512_loadu_si512(x[i].ql + 64 * h);
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(x[i].qh + 32 * h));
            const __m512i qhz = join(qh, _mm256_srli_epi16(qh, 2));
            __m512i q0 = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(_mm512_slli_epi16(qhz, 4), m2));
            __m512i q1 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), _mm512_and_si512(qhz, m2));
            __m512i p0 = _mm512_maddubs_epi16(q0, _mm512_loadu_si512(y[i].qs + 128 * h));
            __m512i p1 = _mm512_maddubs_epi16(q1, _mm512_loadu_si512(y[i].qs + 128 * h + 64));
            sumi = _mm512_dpwssd_epi32(sumi, p0, _mm512_permutexvar_epi16(idx, sc));
            idx = _mm512_add_epi16(idx, four);
            sumi = _mm512_dpwssd_epi32(sumi, p1, _mm512_permutexvar_epi16(idx, sc));
            idx = _mm512_add_epi16(idx, four);
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
    }
    *s = _mm512_reduce_add_ps(acc);
}

/* Q3_K: (low 2 bits | high bit << 2) = quant + 4, the -4 bias applied as
 * -4 * sum_j sc_j * bsum_j. */
static void q3_K_dot(int n, float *s, const void *vx, const void *vy) {
    const quant_block_q3_K *x = vx;
    const quant_block_q8_K *y = vy;
    const __m512i m3 = _mm512_set1_epi8(3);
    const __m512i bit2 = _mm512_set1_epi8(4);
    const __m512i idx0 = run_index(0, 8);
    const __m512i four = _mm512_set1_epi16(4);
    __m512 acc = _mm512_setzero_ps();

    for (int i = 0; i < n / QUANT_QK_K; ++i) {
        const float d = y[i].d * h2f(x[i].d);
        uint32_t o[4];
        quant_unpack_scales_q3(x[i].scales, o);
        const __m128i sc8 = _mm_sub_epi8(_mm_loadu_si128((const __m128i *)o), _mm_set1_epi8(32));
        const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
        const __m256i bs = _mm256_loadu_si256((const __m256i *)y[i].bsums);
        const __m256i bias = _mm256_slli_epi32(_mm256_madd_epi16(sc16, bs), 2);
        __m512i sumi = _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), bias));
        const __m512i sc = _mm512_castsi256_si512(sc16);
        __m512i idx = idx0;

        /* Weights 32k + l: hmask bit k of byte l; moved to bit 2 below.  The
         * high half is pre-shifted so one shift serves runs k and k+1. */
        const __m256i hm = _mm256_loadu_si256((const __m256i *)x[i].hmask);
        const __m512i hz = join(hm, _mm256_srli_epi16(hm, 1));
        for (int h = 0; h < 2; ++h) {
            const __m256i qb = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
            const __m512i qz = join(qb, _mm256_srli_epi16(qb, 2));
            for (int p = 0; p < 2; ++p) {
                const int k = 4 * h + 2 * p; /* first 32-run of these 64 */
                __m512i lo = _mm512_and_si512(_mm512_srli_epi16(qz, 4 * p), m3);
                __m512i hb = k <= 2 ? _mm512_slli_epi16(hz, 2 - k) : _mm512_srli_epi16(hz, k - 2);
                __m512i q = _mm512_or_si512(lo, _mm512_and_si512(hb, bit2));
                __m512i pr = _mm512_maddubs_epi16(q, _mm512_loadu_si512(y[i].qs + 128 * h + 64 * p));
                sumi = _mm512_dpwssd_epi32(sumi, pr, _mm512_permutexvar_epi16(idx, sc));
                idx = _mm512_add_epi16(idx, four);
            }
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
    }
    *s = _mm512_reduce_add_ps(acc);
}

/* Q2_K: quants 0..3 times the low-nibble scales; high-nibble mins through
 * the bsums. */
static void q2_K_dot(int n, float *s, const void *vx, const void *vy) {
    const quant_block_q2_K *x = vx;
    const quant_block_q8_K *y = vy;
    const __m512i m3 = _mm512_set1_epi8(3);
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m512i idx0 = run_index(0, 8);
    const __m512i four = _mm512_set1_epi16(4);
    __m512 acc = _mm512_setzero_ps();
    __m256 accm = _mm256_setzero_ps();

    for (int i = 0; i < n / QUANT_QK_K; ++i) {
        const float d = y[i].d * h2f(x[i].d);
        const float dmin = -y[i].d * h2f(x[i].dmin);
        const __m128i raw = _mm_loadu_si128((const __m128i *)x[i].scales);
        const __m256i m16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), m4));
        const __m256i bs = _mm256_loadu_si256((const __m256i *)y[i].bsums);
        accm = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(_mm256_madd_epi16(m16, bs)), accm);
        const __m512i sc = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(raw, m4)));
        __m512i idx = idx0;
        __m512i sumi = _mm512_setzero_si512();
        for (int h = 0; h < 2; ++h) {
            const __m256i qb = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
            const __m512i qz = join(qb, _mm256_srli_epi16(qb, 2));
            for (int p = 0; p < 2; ++p) {
                __m512i q = _mm512_and_si512(_mm512_srli_epi16(qz, 4 * p), m3);
                __m512i pr = _mm512_maddubs_epi16(q, _mm512_loadu_si512(y[i].qs + 128 * h + 64 * p));
                sumi = _mm512_dpwssd_epi32(sumi, pr, _mm512_permutexvar_epi16(idx, sc));
                idx = _mm512_add_epi16(idx, four);
            }
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
    }
    __m256 a = _mm256_add_ps(accm, _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1)));
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    *s = _mm_cvtss_f32(r);
}

/* IQ4_XS: codes looked up with pshufb; signed*signed products done as
 * |v| * (y negated where v < 0) so maddubs applies. */
static void iq4_xs_dot(int n, float *s, const void *vx, const void *vy) {
    const quant_block_iq4_xs *x = vx;
    const quant_block_q8_K *y = vy;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m512i tbl = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)quant_iq4nl_values));
    const __m512i idx0 = run_index(0, 16);
    const __m512i two = _mm512_set1_epi16(2);
    __m512 acc = _mm512_setzero_ps();

    for (int i = 0; i < n / QUANT_QK_K; ++i) {
        const float d = y[i].d * h2f(x[i].d);
        const __m512i sc = _mm512_castsi128_si512(quant_iq4_xs_scales_x86(x[i].scales_h, x[i].scales_l));
        __m512i idx = idx0;
        __m512i sumi = _mm512_setzero_si512();
        for (int ib = 0; ib < 8; ib += 2) {
            /* Sub-block ib: low then high nibbles of bytes 16ib..+15; ib+1 next. */
            __m256i qb = _mm256_loadu_si256((const __m256i *)(x[i].qs + 16 * ib));
            __m256i lo = _mm256_and_si256(qb, m4), hi = _mm256_and_si256(_mm256_srli_epi16(qb, 4), m4);
            __m512i nib = join(_mm256_permute2x128_si256(lo, hi, 0x20), _mm256_permute2x128_si256(lo, hi, 0x31));
            __m512i v = _mm512_shuffle_epi8(tbl, nib);
            __m512i yv = _mm512_loadu_si512(y[i].qs + 32 * ib);
            __mmask64 neg = _mm512_movepi8_mask(v);
            yv = _mm512_mask_sub_epi8(yv, neg, _mm512_setzero_si512(), yv);
            __m512i p = _mm512_maddubs_epi16(_mm512_abs_epi8(v), yv);
            sumi = _mm512_dpwssd_epi32(sumi, p, _mm512_permutexvar_epi16(idx, sc));
            idx = _mm512_add_epi16(idx, two);
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
    }
    *s = _mm512_reduce_add_ps(acc);
}

/* IQ4_NL x Q8_0, one 32-weight block per step with 256-bit VNNI. */
static void iq4_nl_dot(int n, float *s, const void *vx, const void *vy) {
    const quant_block_iq4_nl *x = vx;
    const quant_block_q8_0 *y = vy;
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m256i tbl = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)quant_iq4nl_values));
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < n / QUANT_QK4_NL; ++i) {
        __m128i qb = _mm_loadu_si128((const __m128i *)x[i].qs);
        __m256i nib = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(qb, 4), m4), _mm_and_si128(qb, m4));
        __m256i v = _mm256_shuffle_epi8(tbl, nib);
        __m256i yv = _mm256_loadu_si256((const __m256i *)y[i].qs);
        __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(v, v), _mm256_sign_epi8(yv, v));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)), _mm256_cvtepi32_ps(p), acc);
    }
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    *s = _mm_cvtss_f32(r);
}

/* Q8_K quantizer, same output as the scalar reference (scale from the first
 * element of largest magnitude; round to nearest-even, the MXCSR default). */
static void q8_K_quant(const float *x, void *vy, int64_t n) {
    quant_block_q8_K *y = vy;
    for (int64_t i = 0; i < n / QUANT_QK_K; ++i, x += QUANT_QK_K) {
        __m512 vmax = _mm512_setzero_ps();
        for (int e = 0; e < QUANT_QK_K; e += 16) vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_loadu_ps(x + e)));
        const float amax = _mm512_reduce_max_ps(vmax);
        if (!amax) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        float max = 0;
        const __m512 va = _mm512_set1_ps(amax);
        for (int e = 0; e < QUANT_QK_K; e += 16) {
            __mmask16 hit = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + e)), va, _CMP_EQ_OQ);
            if (hit) {
                max = x[e + __builtin_ctz((unsigned)hit)];
                break;
            }
        }
        const float iscale = -127.f / max;
        const __m512 vs = _mm512_set1_ps(iscale);
        const __m512i hi = _mm512_set1_epi32(127);
        for (int e = 0; e < QUANT_QK_K; e += 16) {
            __m512i q = _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(vs, _mm512_loadu_ps(x + e))), hi);
            _mm_storeu_si128((__m128i *)(y[i].qs + e), _mm512_cvtepi32_epi8(q));
            y[i].bsums[e / 16] = (int16_t)_mm512_reduce_add_epi32(q);
        }
        y[i].d = 1 / iscale;
    }
}

const quant_simd quant_kquants_avx512 = {
    .dot = {[QUANT_Q2_K] = q2_K_dot,
            [QUANT_Q3_K] = q3_K_dot,
            [QUANT_Q4_K] = q4_K_dot,
            [QUANT_Q5_K] = q5_K_dot,
            [QUANT_Q6_K] = q6_K_dot,
            [QUANT_IQ4_NL] = iq4_nl_dot,
            [QUANT_IQ4_XS] = iq4_xs_dot},
    .quant = {[QUANT_Q8_K] = q8_K_quant},
};
