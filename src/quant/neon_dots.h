/*
 * neon_dots.h — the aarch64 dot kernels, written once and included by
 * dots_neon.c (plain Advanced SIMD) and dots_dotprod.c (built with
 * +dotprod), which differ only in DOT16 below: sdot where the CPU has
 * FEAT_DotProd, widening multiplies and pairwise adds without it.
 *
 * Every quantized dot keeps the scalar reference's order of float work:
 * the integer sums of one block are exact in any order, so they are formed
 * in vectors, then each block's float scaling and the running float sum go
 * block by block as in legacy.c / kquants.c (so each is the scalar
 * reference's float, bit for bit).  The F16 dot sums in the lane order of
 * quant_dot_f16_lanes(.., 8), as the AVX2 F16 dot does; the BF16 dot in four
 * float chains (within the tests' tolerance of the double reference).
 *
 * The includer defines QUANT_NEON_TABLE (the exported table's name) and, for
 * the dotprod level, QUANT_NEON_DOTPROD 1.
 */
#ifndef KILN_QUANT_NEON_DOTS_H
#define KILN_QUANT_NEON_DOTS_H

#include <arm_neon.h>
#include <string.h>

#include "kquants_layout.h"
#include "quant/quant.h"

#define QK 32

#if QUANT_NEON_DOTPROD
/* acc + the 16 products a * b summed by fours (sdot) */
static inline int32x4_t dot16(int32x4_t acc, int8x16_t a, int8x16_t b) { return vdotq_s32(acc, a, b); }
/* the same where |a| <= 64 (no difference with sdot) */
static inline int32x4_t dot16_small(int32x4_t acc, int8x16_t a, int8x16_t b) { return vdotq_s32(acc, a, b); }
#else
/* acc + the 16 products a * b: widened to s16 per half (one product fits,
 * two of -128 * -128 would not), then pairwise into s32 */
static inline int32x4_t dot16(int32x4_t acc, int8x16_t a, int8x16_t b) {
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
    return vpadalq_s16(acc, vmull_high_s8(a, b));
}
/* the same where |a| <= 64: two products per s16 lane fit (2 * 64 * 128) */
static inline int32x4_t dot16_small(int32x4_t acc, int8x16_t a, int8x16_t b) {
    int16x8_t p = vmull_s8(vget_low_s8(a), vget_low_s8(b));
    p = vmlal_high_s8(p, a, b);
    return vpadalq_s16(acc, p);
}
#endif

/* IEEE half to float (fcvt, exact like quant_f16_to_f32 for every non-NaN) */
static inline float neon_h2f(uint16_t h) {
    __fp16 v;
    memcpy(&v, &h, 2);
    return (float)v;
}

/* ---- F16: lanes 0..3 in a0, 4..7 in a1, one fused multiply-add each ---- */

static void neon_dot_f16(int n, float *s, const void *vx, const void *vy) {
    const uint16_t *x = vx, *y = vy;
    float32x4_t a0 = vdupq_n_f32(0), a1 = vdupq_n_f32(0);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        float16x8_t hx = vreinterpretq_f16_u16(vld1q_u16(x + i)), hy = vreinterpretq_f16_u16(vld1q_u16(y + i));
        a0 = vfmaq_f32(a0, vcvt_f32_f16(vget_low_f16(hx)), vcvt_f32_f16(vget_low_f16(hy)));
        a1 = vfmaq_f32(a1, vcvt_high_f32_f16(hx), vcvt_high_f32_f16(hy));
    }
    if (i < n) { /* the last partial group, zero-padded */
        uint16_t tx[8] = {0}, ty[8] = {0};
        memcpy(tx, x + i, (size_t)(n - i) * 2);
        memcpy(ty, y + i, (size_t)(n - i) * 2);
        float16x8_t hx = vreinterpretq_f16_u16(vld1q_u16(tx)), hy = vreinterpretq_f16_u16(vld1q_u16(ty));
        a0 = vfmaq_f32(a0, vcvt_f32_f16(vget_low_f16(hx)), vcvt_f32_f16(vget_low_f16(hy)));
        a1 = vfmaq_f32(a1, vcvt_high_f32_f16(hx), vcvt_high_f32_f16(hy));
    }
    const float32x4_t s4 = vaddq_f32(a0, a1); /* s_l = a_l + a_(l+4) */
    *s = (vgetq_lane_f32(s4, 0) + vgetq_lane_f32(s4, 2)) + (vgetq_lane_f32(s4, 1) + vgetq_lane_f32(s4, 3));
}

/* ---- BF16: a bfloat16 is the top half of a float (shift left 16); 16
 * lanes in four fused multiply-add chains, the tail in float ---- */

static inline float32x4_t bf16_lo(uint16x8_t v) { return vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(v), 16)); }
static inline float32x4_t bf16_hi(uint16x8_t v) { return vreinterpretq_f32_u32(vshll_high_n_u16(v, 16)); }

static void neon_dot_bf16(int n, float *s, const void *vx, const void *vy) {
    const uint16_t *x = vx, *y = vy;
    float32x4_t a0 = vdupq_n_f32(0), a1 = vdupq_n_f32(0), a2 = vdupq_n_f32(0), a3 = vdupq_n_f32(0);
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        const uint16x8_t x0 = vld1q_u16(x + i), x1 = vld1q_u16(x + i + 8);
        const uint16x8_t y0 = vld1q_u16(y + i), y1 = vld1q_u16(y + i + 8);
        a0 = vfmaq_f32(a0, bf16_lo(x0), bf16_lo(y0));
        a1 = vfmaq_f32(a1, bf16_hi(x0), bf16_hi(y0));
        a2 = vfmaq_f32(a2, bf16_lo(x1), bf16_lo(y1));
        a3 = vfmaq_f32(a3, bf16_hi(x1), bf16_hi(y1));
    }
    float tail = 0;
    for (; i < n; i++) tail += quant_bf16_to_f32(x[i]) * quant_bf16_to_f32(y[i]);
    *s = vaddvq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3))) + tail;
}

/* ---- Q8_0 x Q8_0 ---- */

static void neon_dot_q8_0(int n, float *s, const void *vx, const void *vy) {
    const quant_block_q8_0 *x = vx, *y = vy;
    float sum = 0.0f;
    for (int i = 0; i < n / QK; i++) {
        int32x4_t acc = dot16(vdupq_n_s32(0), vld1q_s8(x[i].qs), vld1q_s8(y[i].qs));
        acc = dot16(acc, vld1q_s8(x[i].qs + 16), vld1q_s8(y[i].qs + 16));
        const int isum = vaddvq_s32(acc);
        sum += (float)isum * (neon_h2f(x[i].d) * neon_h2f(y[i].d));
    }
    *s = sum;
}

/* ---- Q4_0 x Q8_0: low nibbles are elements 0..15, high 16..31 ---- */

static void neon_dot_q4_0(int n, float *s, const void *vx, const void *vy) {
    const quant_block_q4_0 *x = vx;
    const quant_block_q8_0 *y = vy;
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    const int8x16_t k8 = vdupq_n_s8(8);
    float sum = 0.0f;
    for (int i = 0; i < n / QK; i++) {
        const uint8x16_t q = vld1q_u8(x[i].qs);
        const int8x16_t lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, m4)), k8);
        const int8x16_t hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), k8);
        int32x4_t acc = dot16_small(vdupq_n_s32(0), lo, vld1q_s8(y[i].qs));
        acc = dot16_small(acc, hi, vld1q_s8(y[i].qs + 16));
        const int isum = vaddvq_s32(acc);
        sum += (float)isum * (neon_h2f(x[i].d) * neon_h2f(y[i].d));
    }
    *s = sum;
}

/* ---- Q4_K x Q8_K ---- */

static void neon_dot_q4_K(int n, float *s, const void *vx, const void *vy) {
    const quant_block_q4_K *x = vx;
    const quant_block_q8_K *y = vy;
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    float sum = 0;
    for (int i = 0; i < n / QUANT_QK_K; ++i) {
        uint32_t o[4];
        quant_unpack_scales_k4(x[i].scales, o);
        uint8_t sc[16];
        memcpy(sc, o, 16); /* 8 scales, then 8 mins */
        /* the mins through the sums of 32 activations */
        const int16x8_t b32 = vpaddq_s16(vld1q_s16(y[i].bsums), vld1q_s16(y[i].bsums + 8));
        const int16x8_t m16 = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(sc + 8)));
        const int msum = vaddvq_s32(vmlal_high_s16(vmull_s16(vget_low_s16(b32), vget_low_s16(m16)), b32, m16));
        int32x4_t acc = vdupq_n_s32(0);
        const uint8_t *q = x[i].qs;
        const int8_t *a = y[i].qs;
        for (int g = 0; g < 4; g++, q += 32, a += 64) {
            const uint8x16_t q0 = vld1q_u8(q), q1 = vld1q_u8(q + 16);
            int32x4_t lo = dot16_small(vdupq_n_s32(0), vreinterpretq_s8_u8(vandq_u8(q0, m4)), vld1q_s8(a));
            lo = dot16_small(lo, vreinterpretq_s8_u8(vandq_u8(q1, m4)), vld1q_s8(a + 16));
            int32x4_t hi = dot16_small(vdupq_n_s32(0), vreinterpretq_s8_u8(vshrq_n_u8(q0, 4)), vld1q_s8(a + 32));
            hi = dot16_small(hi, vreinterpretq_s8_u8(vshrq_n_u8(q1, 4)), vld1q_s8(a + 48));
            acc = vmlaq_n_s32(acc, lo, sc[2 * g]);
            acc = vmlaq_n_s32(acc, hi, sc[2 * g + 1]);
        }
        const int isum = vaddvq_s32(acc);
        sum += y[i].d * (neon_h2f(x[i].d) * isum - neon_h2f(x[i].dmin) * msum);
    }
    *s = sum;
}

/* ---- Q5_K x Q8_K: Q4_K's nibbles with a fifth bit from qh, whose bits
 * 2g and 2g + 1 of byte l belong to the low and high nibbles of qs byte
 * 32g + l; qh moves right by 2 per group ---- */

static void neon_dot_q5_K(int n, float *s, const void *vx, const void *vy) {
    const quant_block_q5_K *x = vx;
    const quant_block_q8_K *y = vy;
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m1 = vdupq_n_u8(1), m2 = vdupq_n_u8(2);
    float sum = 0;
    for (int i = 0; i < n / QUANT_QK_K; ++i) {
        uint32_t o[4];
        quant_unpack_scales_k4(x[i].scales, o);
        uint8_t sc[16];
        memcpy(sc, o, 16); /* 8 scales, then 8 mins */
        const int16x8_t b32 = vpaddq_s16(vld1q_s16(y[i].bsums), vld1q_s16(y[i].bsums + 8));
        const int16x8_t m16 = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(sc + 8)));
        const int msum = vaddvq_s32(vmlal_high_s16(vmull_s16(vget_low_s16(b32), vget_low_s16(m16)), b32, m16));
        int32x4_t acc = vdupq_n_s32(0);
        uint8x16_t h0 = vld1q_u8(x[i].qh), h1 = vld1q_u8(x[i].qh + 16);
        const uint8_t *q = x[i].qs;
        const int8_t *a = y[i].qs;
        for (int g = 0; g < 4; g++, q += 32, a += 64) {
            const uint8x16_t q0 = vld1q_u8(q), q1 = vld1q_u8(q + 16);
            /* quants 0..31: two products per s16 lane fit */
            const uint8x16_t l0 = vorrq_u8(vandq_u8(q0, m4), vshlq_n_u8(vandq_u8(h0, m1), 4));
            const uint8x16_t l1 = vorrq_u8(vandq_u8(q1, m4), vshlq_n_u8(vandq_u8(h1, m1), 4));
            const uint8x16_t u0 = vorrq_u8(vshrq_n_u8(q0, 4), vshlq_n_u8(vandq_u8(h0, m2), 3));
            const uint8x16_t u1 = vorrq_u8(vshrq_n_u8(q1, 4), vshlq_n_u8(vandq_u8(h1, m2), 3));
            h0 = vshrq_n_u8(h0, 2);
            h1 = vshrq_n_u8(h1, 2);
            int32x4_t lo = dot16_small(vdupq_n_s32(0), vreinterpretq_s8_u8(l0), vld1q_s8(a));
            lo = dot16_small(lo, vreinterpretq_s8_u8(l1), vld1q_s8(a + 16));
            int32x4_t hi = dot16_small(vdupq_n_s32(0), vreinterpretq_s8_u8(u0), vld1q_s8(a + 32));
            hi = dot16_small(hi, vreinterpretq_s8_u8(u1), vld1q_s8(a + 48));
            acc = vmlaq_n_s32(acc, lo, sc[2 * g]);
            acc = vmlaq_n_s32(acc, hi, sc[2 * g + 1]);
        }
        const int isum = vaddvq_s32(acc);
        sum += y[i].d * (neon_h2f(x[i].d) * isum - neon_h2f(x[i].dmin) * msum);
    }
    *s = sum;
}

/* ---- Q6_K x Q8_K ----
 * Per half h and 16-byte chunk c of its 32 columns l: the quants of
 * weights 128h + 32k + l (k = 0..3) are ql[64h + 32(k & 1) + l] nibble
 * k >> 1 with bits 2k..2k+1 of qh[32h + l] on top, minus 32; weight
 * 128h + 32k + 16c + l' is in sub-block 8h + 2k + c. */

static void neon_dot_q6_K(int n, float *s, const void *vx, const void *vy) {
    const quant_block_q6_K *x = vx;
    const quant_block_q8_K *y = vy;
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m3 = vdupq_n_u8(0x03);
    const int8x16_t k32 = vdupq_n_s8(32);
    float sum = 0;
    for (int i = 0; i < n / QUANT_QK_K; ++i) {
        int32x4_t acc = vdupq_n_s32(0);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = x[i].ql + 64 * h, *qh = x[i].qh + 32 * h;
            const int8_t *a = y[i].qs + 128 * h, *sc = x[i].scales + 8 * h;
            for (int c = 0; c < 2; c++) {
                const uint8x16_t hb = vld1q_u8(qh + 16 * c);
                const uint8x16_t l0 = vld1q_u8(ql + 16 * c), l1 = vld1q_u8(ql + 32 + 16 * c);
                const uint8x16_t u0 = vorrq_u8(vandq_u8(l0, m4), vshlq_n_u8(vandq_u8(hb, m3), 4));
                const uint8x16_t u1 = vorrq_u8(vandq_u8(l1, m4), vshlq_n_u8(vandq_u8(vshrq_n_u8(hb, 2), m3), 4));
                const uint8x16_t u2 = vorrq_u8(vshrq_n_u8(l0, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(hb, 4), m3), 4));
                const uint8x16_t u3 = vorrq_u8(vshrq_n_u8(l1, 4), vshlq_n_u8(vshrq_n_u8(hb, 6), 4));
                const int32x4_t z = vdupq_n_s32(0);
                const int32x4_t d0 = dot16_small(z, vsubq_s8(vreinterpretq_s8_u8(u0), k32), vld1q_s8(a + 0 + 16 * c));
                const int32x4_t d1 = dot16_small(z, vsubq_s8(vreinterpretq_s8_u8(u1), k32), vld1q_s8(a + 32 + 16 * c));
                const int32x4_t d2 = dot16_small(z, vsubq_s8(vreinterpretq_s8_u8(u2), k32), vld1q_s8(a + 64 + 16 * c));
                const int32x4_t d3 = dot16_small(z, vsubq_s8(vreinterpretq_s8_u8(u3), k32), vld1q_s8(a + 96 + 16 * c));
                acc = vmlaq_n_s32(acc, d0, sc[0 + c]);
                acc = vmlaq_n_s32(acc, d1, sc[2 + c]);
                acc = vmlaq_n_s32(acc, d2, sc[4 + c]);
                acc = vmlaq_n_s32(acc, d3, sc[6 + c]);
            }
        }
        const int isum = vaddvq_s32(acc);
        sum += y[i].d * neon_h2f(x[i].d) * isum;
    }
    *s = sum;
}

/* ---- IQ4_NL x Q8_0 and IQ4_XS x Q8_K: the nibbles index the 16 code
 * values by table lookup (tbl); byte l of a 32-weight group's 16 holds
 * weights l (low nibble) and 16 + l (high) ---- */

/* the integer dot of one 32-weight IQ4 group qs with activations a */
static inline int32x4_t iq4_dot32(int32x4_t acc, int8x16_t values, const uint8_t *qs, const int8_t *a) {
    const uint8x16_t q = vld1q_u8(qs);
    acc = dot16(acc, vqtbl1q_s8(values, vandq_u8(q, vdupq_n_u8(0x0F))), vld1q_s8(a));
    return dot16(acc, vqtbl1q_s8(values, vshrq_n_u8(q, 4)), vld1q_s8(a + 16));
}

static void neon_dot_iq4_nl(int n, float *s, const void *vx, const void *vy) {
    const quant_block_iq4_nl *x = vx;
    const quant_block_q8_0 *y = vy;
    const int8x16_t values = vld1q_s8(quant_iq4nl_values);
    float sum = 0;
    for (int i = 0; i < n / QUANT_QK4_NL; ++i) {
        const int isum = vaddvq_s32(iq4_dot32(vdupq_n_s32(0), values, x[i].qs, y[i].qs));
        sum += neon_h2f(x[i].d) * neon_h2f(y[i].d) * isum;
    }
    *s = sum;
}

static void neon_dot_iq4_xs(int n, float *s, const void *vx, const void *vy) {
    const quant_block_iq4_xs *x = vx;
    const quant_block_q8_K *y = vy;
    const int8x16_t values = vld1q_s8(quant_iq4nl_values);
    float sum = 0;
    for (int i = 0; i < n / QUANT_QK_K; ++i) {
        int32x4_t acc = vdupq_n_s32(0);
        for (int ib = 0; ib < 8; ++ib) {
            /* the 6-bit sub-block scale, biased by 32 */
            const int ls =
                (((x[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | ((x[i].scales_h >> (2 * ib)) & 3) << 4) - 32;
            const int32x4_t d = iq4_dot32(vdupq_n_s32(0), values, x[i].qs + 16 * ib, y[i].qs + 32 * ib);
            acc = vmlaq_n_s32(acc, d, ls);
        }
        const int isum = vaddvq_s32(acc);
        sum += y[i].d * neon_h2f(x[i].d) * isum;
    }
    *s = sum;
}

/* ---- activation quantizers, byte for byte the reference ones (legacy.c
 * q8_0_from_f32, kquants.c q8_K_from_f32): the same float operations per
 * element; roundf is fcvtas (ties away from zero), kquants.c's round_int
 * fcvtns (ties to even) ---- */

/* the largest |x| of n floats (n a multiple of 16) */
static inline float neon_absmax(const float *x, int n) {
    float32x4_t m0 = vabsq_f32(vld1q_f32(x)), m1 = vabsq_f32(vld1q_f32(x + 4));
    float32x4_t m2 = vabsq_f32(vld1q_f32(x + 8)), m3 = vabsq_f32(vld1q_f32(x + 12));
    for (int j = 16; j < n; j += 16) {
        m0 = vmaxq_f32(m0, vabsq_f32(vld1q_f32(x + j)));
        m1 = vmaxq_f32(m1, vabsq_f32(vld1q_f32(x + j + 4)));
        m2 = vmaxq_f32(m2, vabsq_f32(vld1q_f32(x + j + 8)));
        m3 = vmaxq_f32(m3, vabsq_f32(vld1q_f32(x + j + 12)));
    }
    return vmaxvq_f32(vmaxq_f32(vmaxq_f32(m0, m1), vmaxq_f32(m2, m3)));
}

/* 16 int32 lanes to int8 (every value in -128..127 here) */
static inline int8x16_t narrow16(int32x4_t a, int32x4_t b, int32x4_t c, int32x4_t d) {
    return vcombine_s8(vqmovn_s16(vcombine_s16(vqmovn_s32(a), vqmovn_s32(b))),
                       vqmovn_s16(vcombine_s16(vqmovn_s32(c), vqmovn_s32(d))));
}

static void neon_quant_q8_0(const float *x, void *vy, int64_t n) {
    quant_block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        const float d = neon_absmax(x, QK) / 127;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = quant_f32_to_f16(d);
        for (int j = 0; j < QK; j += 16) {
            int32x4_t q[4];
            for (int k = 0; k < 4; k++) q[k] = vcvtaq_s32_f32(vmulq_n_f32(vld1q_f32(x + j + 4 * k), id));
            vst1q_s8(y[i].qs + j, narrow16(q[0], q[1], q[2], q[3]));
        }
    }
}

static void neon_quant_q8_K(const float *x, void *vy, int64_t n) {
    quant_block_q8_K *y = vy;
    for (int64_t i = 0; i < n / QUANT_QK_K; ++i, x += QUANT_QK_K) {
        const float amax = neon_absmax(x, QUANT_QK_K);
        if (!amax) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        int e = 0; /* the first element of that magnitude gives the sign */
        while (x[e] != amax && x[e] != -amax) e++;
        const float iscale = -127.f / x[e];
        const int32x4_t top = vdupq_n_s32(127);
        for (int j = 0; j < QUANT_QK_K; j += 16) {
            int32x4_t q[4];
            for (int k = 0; k < 4; k++)
                q[k] = vminq_s32(vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + j + 4 * k), iscale)), top);
            const int8x16_t b = narrow16(q[0], q[1], q[2], q[3]);
            vst1q_s8(y[i].qs + j, b);
            y[i].bsums[j / 16] = (int16_t)vaddlvq_s8(b);
        }
        y[i].d = 1 / iscale;
    }
}

const quant_simd QUANT_NEON_TABLE = {
    .dot =
        {
            [QUANT_F16] = neon_dot_f16,
            [QUANT_BF16] = neon_dot_bf16,
            [QUANT_Q8_0] = neon_dot_q8_0,
            [QUANT_Q4_0] = neon_dot_q4_0,
            [QUANT_Q4_K] = neon_dot_q4_K,
            [QUANT_Q5_K] = neon_dot_q5_K,
            [QUANT_Q6_K] = neon_dot_q6_K,
            [QUANT_IQ4_NL] = neon_dot_iq4_nl,
            [QUANT_IQ4_XS] = neon_dot_iq4_xs,
        },
    .quant = {[QUANT_Q8_0] = neon_quant_q8_0, [QUANT_Q8_K] = neon_quant_q8_K},
};

#endif
