/*
 * matmul_neon.c — the NEON F16 block kernel for F16 weights (kern_tile_fn in
 * matmul.h) of both aarch64 levels: rows x tokens of products in the lane
 * order of their F16 vec_dot, 8 lanes (quant_dot_f16_lanes(.., 8) is the
 * scalar twin):
 *     lane l sums w[k] * a[k] for k = l, l + 8, ... with one fma each, the
 *     last partial group zero-padded; then h_l = l_l + l_(l+4) and
 *     (h0 + h2) + (h1 + h3)
 * so each output is the very float the one-row dot gives, whatever batch
 * its token is in.  The body is matmul_f16.h's; this file gives it the
 * width: an 8-lane vector as a pair of 4-lane NEON vectors.
 */
#include "kernels/matmul.h"

#include "kernels/level.h"
#include "kernels/neon.h"

#include <string.h>

/* 8 lanes, a 3 x 4 register tile: 12 accumulators of two registers each,
 * 3 weight vectors and an activation, within the 32 vector registers. */
#define LANES 8
#define TR 3
#define TT 4
typedef struct {
    float32x4_t lo, hi;
} vecf;
static inline vecf vzero(void) { return (vecf){vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)}; }
static inline vecf vload(const float *p) { return (vecf){vld1q_f32(p), vld1q_f32(p + 4)}; }
static inline vecf vload_h(const uint16_t *p) {
    const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(p));
    return (vecf){vcvt_f32_f16(vget_low_f16(h)), vcvt_high_f32_f16(h)};
}
static inline vecf vfma(vecf a, vecf b, vecf c) {
    return (vecf){vfmaq_f32(c.lo, a.lo, b.lo), vfmaq_f32(c.hi, a.hi, b.hi)};
}
static inline void vstore(float *p, vecf v) {
    vst1q_f32(p, v.lo);
    vst1q_f32(p + 4, v.hi);
}
static inline float vsum(vecf v) { return kn_fold_cross(v.lo, v.hi); }
static inline void vprefetch(const char *p) { __builtin_prefetch(p, 0, 3); }

#include "kernels/matmul_f16.h"

void kern_tile_f16_neon(int n, const void *w, size_t wrow, int nr, const void *a, size_t arow, int nt, float *y,
                        int64_t ldy) {
    tile_f16(n, w, wrow, nr, a, arow, nt, y, ldy);
}
