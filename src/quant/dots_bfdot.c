/*
 * dots_bfdot.c — the BF16 dot with bfdot (built with
 * -march=armv8.2-a+dotprod+bf16; only called when the CPU reports
 * FEAT_BF16): each lane adds two products per step, eight bfloat16 pairs
 * per instruction.  bfdot forms its sums with its own rounding (round to
 * odd inside, subnormals flushed), so the result is within the tests'
 * tolerance of the double reference, not equal to the widening dot's.
 */
#include <arm_neon.h>

#include "quant/quant.h"

static void bfdot_dot_bf16(int n, float *s, const void *vx, const void *vy) {
    const uint16_t *x = vx, *y = vy;
    float32x4_t a0 = vdupq_n_f32(0), a1 = vdupq_n_f32(0), a2 = vdupq_n_f32(0), a3 = vdupq_n_f32(0);
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = vbfdotq_f32(a0, vreinterpretq_bf16_u16(vld1q_u16(x + i)), vreinterpretq_bf16_u16(vld1q_u16(y + i)));
        a1 =
            vbfdotq_f32(a1, vreinterpretq_bf16_u16(vld1q_u16(x + i + 8)), vreinterpretq_bf16_u16(vld1q_u16(y + i + 8)));
        a2 = vbfdotq_f32(a2, vreinterpretq_bf16_u16(vld1q_u16(x + i + 16)),
                         vreinterpretq_bf16_u16(vld1q_u16(y + i + 16)));
        a3 = vbfdotq_f32(a3, vreinterpretq_bf16_u16(vld1q_u16(x + i + 24)),
                         vreinterpretq_bf16_u16(vld1q_u16(y + i + 24)));
    }
    for (; i + 8 <= n; i += 8)
        a0 = vbfdotq_f32(a0, vreinterpretq_bf16_u16(vld1q_u16(x + i)), vreinterpretq_bf16_u16(vld1q_u16(y + i)));
    float tail = 0;
    for (; i < n; i++) tail += quant_bf16_to_f32(x[i]) * quant_bf16_to_f32(y[i]);
    *s = vaddvq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3))) + tail;
}

const quant_simd quant_quant_bf16 = {.dot = {[QUANT_BF16] = bfdot_dot_bf16}};
