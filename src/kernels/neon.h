/*
 * neon.h — the small NEON helpers the kernels folder's *_neon.c files share
 * (internal to src/kernels, aarch64 only): halves to floats and back, the
 * 8-lane sums the x86 twins' orders ask for, and e^x by kern_exp_attn's
 * steps lane by lane.  Every function here gives the bits of its scalar
 * counterpart.
 */
#ifndef KILN_KERNELS_NEON_H
#define KILN_KERNELS_NEON_H

#include <arm_neon.h>
#include <stdint.h>

/* 4 halves at p to floats (exact), 4 floats rounded to halves (nearest
 * even, as quant_f32_to_f16). */
static inline float32x4_t kn_load_h4(const uint16_t *p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
static inline void kn_store_h4(uint16_t *p, float32x4_t v) { vst1_u16(p, vreinterpret_u16_f16(vcvt_f16_f32(v))); }
/* one half to a float and back */
static inline float kn_h2f(uint16_t h) { return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0); }
static inline uint16_t kn_f2h(float f) { return vget_lane_u16(vreinterpret_u16_f16(vcvt_f16_f32(vdupq_n_f32(f))), 0); }
/* round to F16 and back */
static inline float32x4_t kn_rnd16(float32x4_t v) { return vcvt_f32_f16(vcvt_f16_f32(v)); }

/* The fold of an 8-lane sum held as lo (lanes 0-3) and hi (4-7):
 * h_l = x_l + x_(l+4), then (h0 + h1) + (h2 + h3). */
static inline float kn_fold_pairs(float32x4_t lo, float32x4_t hi) {
    const float32x4_t h = vaddq_f32(lo, hi);
    const float32x4_t p = vpaddq_f32(h, h); /* h0 + h1, h2 + h3, .. */
    return vgetq_lane_f32(p, 0) + vgetq_lane_f32(p, 1);
}
/* The same h, then (h0 + h2) + (h1 + h3) (the F16 vec_dot's order). */
static inline float kn_fold_cross(float32x4_t lo, float32x4_t hi) {
    const float32x4_t h = vaddq_f32(lo, hi);
    const float32x2_t s = vadd_f32(vget_low_f32(h), vget_high_f32(h)); /* h0 + h2, h1 + h3 */
    return vget_lane_f32(s, 0) + vget_lane_f32(s, 1);
}

/* kern_exp_attn on 4 lanes, bit for bit: x clamped to [-87.3, 88.7],
 * x = k ln2 + r (ln2 in two parts), a degree-6 polynomial in r, times 2^k
 * in two halves. */
static inline float32x4_t kn_exp4(float32x4_t x) {
    x = vminq_f32(vmaxq_f32(x, vdupq_n_f32(-87.3f)), vdupq_n_f32(88.7f));
    const float32x4_t k = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(1.44269504088896341f)));
    float32x4_t r = vfmsq_f32(x, k, vdupq_n_f32(0.693359375f));
    r = vfmsq_f32(r, k, vdupq_n_f32(-2.12194440e-4f));
    float32x4_t p = vdupq_n_f32(1.9875691500e-4f);
    p = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), p, r);
    p = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), p, r);
    p = vfmaq_f32(vaddq_f32(r, vdupq_n_f32(1.0f)), p, vmulq_f32(r, r));
    const int32x4_t ki = vcvtq_s32_f32(k), k1 = vshrq_n_s32(ki, 1), k2 = vsubq_s32(ki, k1);
    const int32x4_t b1 = vshlq_n_s32(vaddq_s32(k1, vdupq_n_s32(127)), 23);
    const int32x4_t b2 = vshlq_n_s32(vaddq_s32(k2, vdupq_n_s32(127)), 23);
    return vmulq_f32(vmulq_f32(p, vreinterpretq_f32_s32(b1)), vreinterpretq_f32_s32(b2));
}

#endif
