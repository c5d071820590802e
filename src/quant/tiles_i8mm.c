/*
 * tiles_i8mm.c — the block kernels (quant_tile_fn) of Q8_0, Q4_0 and Q4_K weights
 * with smmla (built with -march=armv8.2-a+dotprod+i8mm; only called when
 * the CPU reports FEAT_I8MM).
 *
 * smmla multiplies a 2 x 8 matrix of int8 by the transpose of another and
 * adds the 2 x 2 result to int32 lanes: with two weight rows as the first
 * operand and two activation rows as the second, one instruction forms the
 * 8-element dots of four (row, token) pairs, and four of them a 32-element
 * block's: lanes {w0.x0, w0.x1, w1.x0, w1.x1}.  The integer sums are exact;
 * each lane then scales and adds block by block as the scalar reference
 * (legacy.c, kquants.c) does, so every output is its float bit for bit.  An odd last
 * row or token is paired with itself and its copy dropped; one token alone
 * (decode) takes the dotprod level's one-token dot per row instead, the
 * same floats for half the integer work.
 */
#include <arm_neon.h>
#include <string.h>

#include "kquants_layout.h"
#include "quant/quant.h"

#define QK 32

/* bytes 0..7 of a then of b (zip1 of the 64-bit halves), and bytes 8..15 */
static inline int8x16_t lo64(int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}
static inline int8x16_t hi64(int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}

/* the exact dots of 32-element rows a (weights) and b (activations), two
 * of each given as their halves 0..15 (a0, b0) and 16..31 (a1, b1) */
static inline int32x4_t mm_block(int8x16_t a00, int8x16_t a01, int8x16_t a10, int8x16_t a11, int8x16_t b00,
                                 int8x16_t b01, int8x16_t b10, int8x16_t b11) {
    int32x4_t acc = vmmlaq_s32(vdupq_n_s32(0), lo64(a00, a10), lo64(b00, b10));
    acc = vmmlaq_s32(acc, hi64(a00, a10), hi64(b00, b10));
    acc = vmmlaq_s32(acc, lo64(a01, a11), lo64(b01, b11));
    return vmmlaq_s32(acc, hi64(a01, a11), hi64(b01, b11));
}

/* {h0, h0, h1, h1} and {h0, h1, h0, h1} as floats (fcvtl, exact) */
static inline float32x4_t f16_pairs(uint16_t h0, uint16_t h1) {
    const uint64_t v = (uint64_t)h0 * 0x10001u | ((uint64_t)h1 * 0x10001u) << 32;
    return vcvt_f32_f16(vreinterpret_f16_u64(vcreate_u64(v)));
}
static inline float32x4_t f16_alt(uint16_t h0, uint16_t h1) {
    const uint64_t v = ((uint64_t)h0 | (uint64_t)h1 << 16) * 0x100000001ull;
    return vcvt_f32_f16(vreinterpret_f16_u64(vcreate_u64(v)));
}

/* The four dots of weight rows w0, w1 (type Q8_0 or Q4_0) with Q8_0
 * activation rows x0, x1 over nb blocks: {w0.x0, w0.x1, w1.x0, w1.x1}. */
static inline __attribute__((always_inline)) float32x4_t tile_2x2(int q4, int nb, const uint8_t *w0, const uint8_t *w1,
                                                                  const quant_block_q8_0 *x0,
                                                                  const quant_block_q8_0 *x1) {
    const size_t wb = q4 ? sizeof(quant_block_q4_0) : sizeof(quant_block_q8_0);
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    const int8x16_t k8 = vdupq_n_s8(8);
    float32x4_t sum = vdupq_n_f32(0);
    for (int i = 0; i < nb; i++, w0 += wb, w1 += wb) {
        uint16_t d0, d1;
        memcpy(&d0, w0, 2);
        memcpy(&d1, w1, 2);
        int8x16_t a00, a01, a10, a11;
        if (q4) { /* low nibbles are elements 0..15, high 16..31; minus 8 */
            const uint8x16_t q0 = vld1q_u8(w0 + 2), q1 = vld1q_u8(w1 + 2);
            a00 = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q0, m4)), k8);
            a01 = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q0, 4)), k8);
            a10 = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q1, m4)), k8);
            a11 = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q1, 4)), k8);
        } else {
            a00 = vld1q_s8((const int8_t *)w0 + 2);
            a01 = vld1q_s8((const int8_t *)w0 + 18);
            a10 = vld1q_s8((const int8_t *)w1 + 2);
            a11 = vld1q_s8((const int8_t *)w1 + 18);
        }
        const int32x4_t isum = mm_block(a00, a01, a10, a11, vld1q_s8(x0[i].qs), vld1q_s8(x0[i].qs + 16),
                                        vld1q_s8(x1[i].qs), vld1q_s8(x1[i].qs + 16));
        /* (float)isum * (d_w * d_x), then the running sum: the reference's order */
        const float32x4_t d = vmulq_f32(f16_pairs(d0, d1), f16_alt(x0[i].d, x1[i].d));
        sum = vaddq_f32(sum, vmulq_f32(vcvtq_f32_s32(isum), d));
    }
    return sum;
}

static inline __attribute__((always_inline)) void tile_q(int q4, int n, const void *w, size_t wrow, int nr,
                                                         const void *a, size_t arow, int nt, float *y, int64_t ldy) {
    const int nb = n / QK;
    if (nt == 1) {
        const quant_vec_dot_fn dot = quant_quant_dotprod.dot[q4 ? QUANT_Q4_0 : QUANT_Q8_0];
        for (int r = 0; r < nr; r++) dot(n, y + r, (const uint8_t *)w + (size_t)r * wrow, a);
        return;
    }
    for (int r = 0; r < nr; r += 2) {
        const uint8_t *w0 = (const uint8_t *)w + (size_t)r * wrow;
        const uint8_t *w1 = r + 1 < nr ? w0 + wrow : w0;
        for (int t = 0; t < nt; t += 2) {
            const quant_block_q8_0 *x0 = (const quant_block_q8_0 *)((const uint8_t *)a + (size_t)t * arow);
            const quant_block_q8_0 *x1 = t + 1 < nt ? (const quant_block_q8_0 *)((const uint8_t *)x0 + arow) : x0;
            float o[4];
            vst1q_f32(o, tile_2x2(q4, nb, w0, w1, x0, x1));
            float *y0 = y + (int64_t)t * ldy + r;
            y0[0] = o[0];
            if (t + 1 < nt) y0[ldy] = o[1];
            if (r + 1 < nr) {
                y0[1] = o[2];
                if (t + 1 < nt) y0[ldy + 1] = o[3];
            }
        }
    }
}

static void tile_q8_0(int n, const void *w, size_t wrow, int nr, const void *a, size_t arow, int nt, float *y,
                      int64_t ldy) {
    tile_q(0, n, w, wrow, nr, a, arow, nt, y, ldy);
}

static void tile_q4_0(int n, const void *w, size_t wrow, int nr, const void *a, size_t arow, int nt, float *y,
                      int64_t ldy) {
    tile_q(1, n, w, wrow, nr, a, arow, nt, y, ldy);
}

/* ---- Q4_K x Q8_K: per 32-weight sub-block the four dots by smmla, times
 * each row's 6-bit scale; the mins through the tokens' sums of 16 ---- */

/* sum over the 8 sub-blocks of mins m (8 bytes) times the sums of 32 of
 * bsums (16 sums of 16) */
static inline int q4k_msum(const uint8_t *m, const int16_t *bsums) {
    const int16x8_t b32 = vpaddq_s16(vld1q_s16(bsums), vld1q_s16(bsums + 8));
    const int16x8_t m16 = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(m)));
    return vaddvq_s32(vmlal_high_s16(vmull_s16(vget_low_s16(b32), vget_low_s16(m16)), b32, m16));
}

/* {f0, f0, f1, f1} and {f0, f1, f0, f1} */
static inline float32x4_t f32_pairs(float f0, float f1) { return vcombine_f32(vdup_n_f32(f0), vdup_n_f32(f1)); }
static inline float32x4_t f32_alt(float f0, float f1) {
    const float32x2_t v = vset_lane_f32(f1, vdup_n_f32(f0), 1);
    return vcombine_f32(v, v);
}

static float32x4_t tile_q4_K_2x2(int nb, const quant_block_q4_K *w0, const quant_block_q4_K *w1,
                                 const quant_block_q8_K *x0, const quant_block_q8_K *x1) {
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    float32x4_t sum = vdupq_n_f32(0);
    for (int i = 0; i < nb; i++) {
        uint32_t o0[4], o1[4];
        quant_unpack_scales_k4(w0[i].scales, o0);
        quant_unpack_scales_k4(w1[i].scales, o1);
        uint8_t s0[16], s1[16];
        memcpy(s0, o0, 16); /* 8 scales, then 8 mins */
        memcpy(s1, o1, 16);
        int ms[4];
        ms[0] = q4k_msum(s0 + 8, x0[i].bsums);
        ms[1] = q4k_msum(s0 + 8, x1[i].bsums);
        ms[2] = q4k_msum(s1 + 8, x0[i].bsums);
        ms[3] = q4k_msum(s1 + 8, x1[i].bsums);
        int32x4_t acc = vdupq_n_s32(0);
        const uint8_t *q0 = w0[i].qs, *q1 = w1[i].qs;
        const int8_t *a0 = x0[i].qs, *a1 = x1[i].qs;
        for (int g = 0; g < 4; g++, q0 += 32, q1 += 32, a0 += 64, a1 += 64) {
            const uint8x16_t u00 = vld1q_u8(q0), u01 = vld1q_u8(q0 + 16);
            const uint8x16_t u10 = vld1q_u8(q1), u11 = vld1q_u8(q1 + 16);
            /* sub-block 2g: the low nibbles; 2g + 1: the high ones */
            const int32x4_t lo =
                mm_block(vreinterpretq_s8_u8(vandq_u8(u00, m4)), vreinterpretq_s8_u8(vandq_u8(u01, m4)),
                         vreinterpretq_s8_u8(vandq_u8(u10, m4)), vreinterpretq_s8_u8(vandq_u8(u11, m4)), vld1q_s8(a0),
                         vld1q_s8(a0 + 16), vld1q_s8(a1), vld1q_s8(a1 + 16));
            const int32x4_t hi =
                mm_block(vreinterpretq_s8_u8(vshrq_n_u8(u00, 4)), vreinterpretq_s8_u8(vshrq_n_u8(u01, 4)),
                         vreinterpretq_s8_u8(vshrq_n_u8(u10, 4)), vreinterpretq_s8_u8(vshrq_n_u8(u11, 4)),
                         vld1q_s8(a0 + 32), vld1q_s8(a0 + 48), vld1q_s8(a1 + 32), vld1q_s8(a1 + 48));
            const int32x4_t sl = vcombine_s32(vdup_n_s32(s0[2 * g]), vdup_n_s32(s1[2 * g]));
            const int32x4_t sh = vcombine_s32(vdup_n_s32(s0[2 * g + 1]), vdup_n_s32(s1[2 * g + 1]));
            acc = vmlaq_s32(acc, lo, sl);
            acc = vmlaq_s32(acc, hi, sh);
        }
        /* y.d * (d * isum - dmin * msum), as kquants.c's q4_K_dot */
        const float32x4_t d = f16_pairs(w0[i].d, w1[i].d), dmin = f16_pairs(w0[i].dmin, w1[i].dmin);
        const float32x4_t t =
            vsubq_f32(vmulq_f32(d, vcvtq_f32_s32(acc)), vmulq_f32(dmin, vcvtq_f32_s32(vld1q_s32(ms))));
        sum = vaddq_f32(sum, vmulq_f32(f32_alt(x0[i].d, x1[i].d), t));
    }
    return sum;
}

static void tile_q4_K(int n, const void *w, size_t wrow, int nr, const void *a, size_t arow, int nt, float *y,
                      int64_t ldy) {
    const int nb = n / QUANT_QK_K;
    if (nt == 1) {
        const quant_vec_dot_fn dot = quant_quant_dotprod.dot[QUANT_Q4_K];
        for (int r = 0; r < nr; r++) dot(n, y + r, (const uint8_t *)w + (size_t)r * wrow, a);
        return;
    }
    for (int r = 0; r < nr; r += 2) {
        const quant_block_q4_K *w0 = (const quant_block_q4_K *)((const uint8_t *)w + (size_t)r * wrow);
        const quant_block_q4_K *w1 = r + 1 < nr ? (const quant_block_q4_K *)((const uint8_t *)w0 + wrow) : w0;
        for (int t = 0; t < nt; t += 2) {
            const quant_block_q8_K *x0 = (const quant_block_q8_K *)((const uint8_t *)a + (size_t)t * arow);
            const quant_block_q8_K *x1 = t + 1 < nt ? (const quant_block_q8_K *)((const uint8_t *)x0 + arow) : x0;
            float o[4];
            vst1q_f32(o, tile_q4_K_2x2(nb, w0, w1, x0, x1));
            float *y0 = y + (int64_t)t * ldy + r;
            y0[0] = o[0];
            if (t + 1 < nt) y0[ldy] = o[1];
            if (r + 1 < nr) {
                y0[1] = o[2];
                if (t + 1 < nt) y0[ldy + 1] = o[3];
            }
        }
    }
}

const quant_simd quant_quant_i8mm = {
    .tile = {[QUANT_Q8_0] = tile_q8_0, [QUANT_Q4_0] = tile_q4_0, [QUANT_Q4_K] = tile_q4_K}};
