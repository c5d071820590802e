/*
 * legacy.c — scalar kernels of F32, F16, BF16 and the 32-element block types
 * Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1.
 *
 * The quantizers follow ggml's reference quantizers step for step (same
 * float operations in the same order, same truncations), so a row quantized
 * here is byte-identical to what llama.cpp's tools write.  This file is built
 * without ISA flags: no FMA contraction can change those float results.
 */
#include "quant/quant.h"

#include <float.h>
#include <math.h>
#include <string.h>

#define QK 32

static inline float h2f(uint16_t h) { return quant_f16_to_f32(h); }
static inline uint16_t f2h(float f) { return quant_f32_to_f16(f); }

static float block_absmax(const float *x, float *signed_max) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < QK; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    if (signed_max) *signed_max = max;
    return amax;
}

static void block_minmax(const float *x, float *mn, float *mx) {
    float lo = FLT_MAX, hi = -FLT_MAX;
    for (int j = 0; j < QK; j++) {
        if (x[j] < lo) lo = x[j];
        if (x[j] > hi) hi = x[j];
    }
    *mn = lo;
    *mx = hi;
}

/* ---- F32 / F16 / BF16 ---- */

static void f32_to_f32(const void *x, float *y, int64_t n) { memcpy(y, x, (size_t)n * sizeof(float)); }
static void f32_from_f32(const float *x, void *y, int64_t n) { memcpy(y, x, (size_t)n * sizeof(float)); }

static void f16_to_f32(const void *x, float *y, int64_t n) {
    const uint16_t *h = x;
    for (int64_t i = 0; i < n; i++) y[i] = h2f(h[i]);
}
static void f16_from_f32(const float *x, void *y, int64_t n) {
    uint16_t *h = y;
    for (int64_t i = 0; i < n; i++) h[i] = f2h(x[i]);
}
static void bf16_to_f32(const void *x, float *y, int64_t n) {
    const uint16_t *h = x;
    for (int64_t i = 0; i < n; i++) y[i] = quant_bf16_to_f32(h[i]);
}
static void bf16_from_f32(const float *x, void *y, int64_t n) {
    uint16_t *h = y;
    for (int64_t i = 0; i < n; i++) h[i] = quant_f32_to_bf16(x[i]);
}

/* Float rows accumulate in double: the reference the SIMD sums are held to. */
static void dot_f32(int n, float *s, const void *vx, const void *vy) {
    const float *x = vx, *y = vy;
    double acc = 0.0;
    for (int i = 0; i < n; i++) acc += (double)x[i] * y[i];
    *s = (float)acc;
}
static void dot_f16(int n, float *s, const void *vx, const void *vy) {
    const uint16_t *x = vx, *y = vy;
    double acc = 0.0;
    for (int i = 0; i < n; i++) acc += (double)h2f(x[i]) * h2f(y[i]);
    *s = (float)acc;
}
float quant_dot_f16_lanes(int n, const uint16_t *x, const uint16_t *y, int lanes) {
    float acc[16] = {0};
    for (int i = 0; i < n; i += lanes)
        for (int l = 0; l < lanes; l++) /* past n: 0 x 0, as the zero-padded last group */
            acc[l] = __builtin_fmaf(i + l < n ? h2f(x[i + l]) : 0.0f, i + l < n ? h2f(y[i + l]) : 0.0f, acc[l]);
    if (lanes == 16)
        for (int l = 0; l < 8; l++) acc[l] += acc[l + 8];
    float s4[4];
    for (int l = 0; l < 4; l++) s4[l] = acc[l] + acc[l + 4];
    return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}
static void dot_bf16(int n, float *s, const void *vx, const void *vy) {
    const uint16_t *x = vx, *y = vy;
    double acc = 0.0;
    for (int i = 0; i < n; i++) acc += (double)quant_bf16_to_f32(x[i]) * quant_bf16_to_f32(y[i]);
    *s = (float)acc;
}

/* ---- Q4_0: d = max / -8, q = x/d + 8 in 0..15, value (q - 8) * d ---- */

static void q4_0_from_f32(const float *x, void *vy, int64_t n) {
    quant_block_q4_0 *y = vy;
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        float max;
        block_absmax(x, &max);
        const float d = max / -8;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = f2h(d);
        for (int j = 0; j < QK / 2; j++) {
            const float x0 = x[j] * id, x1 = x[QK / 2 + j] * id;
            int q0 = (int8_t)(x0 + 8.5f), q1 = (int8_t)(x1 + 8.5f);
            if (q0 > 15) q0 = 15;
            if (q1 > 15) q1 = 15;
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

static void q4_0_to_f32(const void *vx, float *y, int64_t n) {
    const quant_block_q4_0 *x = vx;
    for (int64_t i = 0; i < n / QK; i++, y += QK) {
        const float d = h2f(x[i].d);
        for (int j = 0; j < QK / 2; j++) {
            y[j] = ((x[i].qs[j] & 0x0F) - 8) * d;
            y[QK / 2 + j] = ((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

static void dot_q4_0_q8_0(int n, float *s, const void *vx, const void *vy) {
    const quant_block_q4_0 *x = vx;
    const quant_block_q8_0 *y = vy;
    float sum = 0.0f;
    for (int i = 0; i < n / QK; i++) {
        int acc = 0;
        for (int j = 0; j < QK / 2; j++) {
            acc += ((x[i].qs[j] & 0x0F) - 8) * y[i].qs[j];
            acc += ((x[i].qs[j] >> 4) - 8) * y[i].qs[QK / 2 + j];
        }
        sum += (float)acc * (h2f(x[i].d) * h2f(y[i].d));
    }
    *s = sum;
}

/* ---- Q4_1: d = (max - min) / 15, m = min, value q * d + m ---- */

static void q4_1_from_f32(const float *x, void *vy, int64_t n) {
    quant_block_q4_1 *y = vy;
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        float mn, mx;
        block_minmax(x, &mn, &mx);
        const float d = (mx - mn) / 15;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = f2h(d);
        y[i].m = f2h(mn);
        for (int j = 0; j < QK / 2; j++) {
            const float x0 = (x[j] - mn) * id, x1 = (x[QK / 2 + j] - mn) * id;
            int q0 = (int8_t)(x0 + 0.5f), q1 = (int8_t)(x1 + 0.5f);
            if (q0 > 15) q0 = 15;
            if (q1 > 15) q1 = 15;
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

static void q4_1_to_f32(const void *vx, float *y, int64_t n) {
    const quant_block_q4_1 *x = vx;
    for (int64_t i = 0; i < n / QK; i++, y += QK) {
        const float d = h2f(x[i].d), m = h2f(x[i].m);
        for (int j = 0; j < QK / 2; j++) {
            y[j] = (x[i].qs[j] & 0x0F) * d + m;
            y[QK / 2 + j] = (x[i].qs[j] >> 4) * d + m;
        }
    }
}

/* sum_j (q_j d + m) * y_j = d dy sum q_j yq_j + m * s, s = dy * sum yq_j */
static void dot_q4_1_q8_1(int n, float *s, const void *vx, const void *vy) {
    const quant_block_q4_1 *x = vx;
    const quant_block_q8_1 *y = vy;
    float sum = 0.0f;
    for (int i = 0; i < n / QK; i++) {
        int acc = 0;
        for (int j = 0; j < QK / 2; j++) {
            acc += (x[i].qs[j] & 0x0F) * y[i].qs[j];
            acc += (x[i].qs[j] >> 4) * y[i].qs[QK / 2 + j];
        }
        sum += (h2f(x[i].d) * h2f(y[i].d)) * (float)acc + h2f(x[i].m) * h2f(y[i].s);
    }
    *s = sum;
}

/* ---- Q5_0 / Q5_1: like Q4 with a fifth bit per element in qh ---- */

static void put_q5(uint8_t *qs, uint8_t *qh_out, const int *q) {
    uint32_t qh = 0;
    for (int j = 0; j < QK / 2; j++) {
        qs[j] = (uint8_t)((q[j] & 0x0F) | ((q[QK / 2 + j] & 0x0F) << 4));
        qh |= (uint32_t)((q[j] >> 4) & 1) << j;
        qh |= (uint32_t)((q[QK / 2 + j] >> 4) & 1) << (j + QK / 2);
    }
    memcpy(qh_out, &qh, 4);
}

static void get_q5(const uint8_t *qs, const uint8_t *qh_in, int *q) {
    uint32_t qh;
    memcpy(&qh, qh_in, 4);
    for (int j = 0; j < QK / 2; j++) {
        q[j] = (qs[j] & 0x0F) | (((qh >> j) & 1) << 4);
        q[QK / 2 + j] = (qs[j] >> 4) | (((qh >> (j + QK / 2)) & 1) << 4);
    }
}

static void q5_0_from_f32(const float *x, void *vy, int64_t n) {
    quant_block_q5_0 *y = vy;
    int q[QK];
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        float max;
        block_absmax(x, &max);
        const float d = max / -16;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = f2h(d);
        for (int j = 0; j < QK; j++) {
            q[j] = (int8_t)(x[j] * id + 16.5f);
            if (q[j] > 31) q[j] = 31;
        }
        put_q5(y[i].qs, y[i].qh, q);
    }
}

static void q5_0_to_f32(const void *vx, float *y, int64_t n) {
    const quant_block_q5_0 *x = vx;
    int q[QK];
    for (int64_t i = 0; i < n / QK; i++, y += QK) {
        const float d = h2f(x[i].d);
        get_q5(x[i].qs, x[i].qh, q);
        for (int j = 0; j < QK; j++) y[j] = (q[j] - 16) * d;
    }
}

static void dot_q5_0_q8_0(int n, float *s, const void *vx, const void *vy) {
    const quant_block_q5_0 *x = vx;
    const quant_block_q8_0 *y = vy;
    int q[QK];
    float sum = 0.0f;
    for (int i = 0; i < n / QK; i++) {
        get_q5(x[i].qs, x[i].qh, q);
        int acc = 0;
        for (int j = 0; j < QK; j++) acc += (q[j] - 16) * y[i].qs[j];
        sum += (float)acc * (h2f(x[i].d) * h2f(y[i].d));
    }
    *s = sum;
}

static void q5_1_from_f32(const float *x, void *vy, int64_t n) {
    quant_block_q5_1 *y = vy;
    int q[QK];
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        float mn, mx;
        block_minmax(x, &mn, &mx);
        const float d = (mx - mn) / 31;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = f2h(d);
        y[i].m = f2h(mn);
        /* no clamp here (ggml has none): (x - min) * id <= 31 by construction */
        for (int j = 0; j < QK; j++) q[j] = (uint8_t)((x[j] - mn) * id + 0.5f);
        put_q5(y[i].qs, y[i].qh, q);
    }
}

static void q5_1_to_f32(const void *vx, float *y, int64_t n) {
    const quant_block_q5_1 *x = vx;
    int q[QK];
    for (int64_t i = 0; i < n / QK; i++, y += QK) {
        const float d = h2f(x[i].d), m = h2f(x[i].m);
        get_q5(x[i].qs, x[i].qh, q);
        for (int j = 0; j < QK; j++) y[j] = q[j] * d + m;
    }
}

static void dot_q5_1_q8_1(int n, float *s, const void *vx, const void *vy) {
    const quant_block_q5_1 *x = vx;
    const quant_block_q8_1 *y = vy;
    int q[QK];
    float sum = 0.0f;
    for (int i = 0; i < n / QK; i++) {
        get_q5(x[i].qs, x[i].qh, q);
        int acc = 0;
        for (int j = 0; j < QK; j++) acc += q[j] * y[i].qs[j];
        sum += (h2f(x[i].d) * h2f(y[i].d)) * (float)acc + h2f(x[i].m) * h2f(y[i].s);
    }
    *s = sum;
}

/* ---- Q8_0 / Q8_1: d = amax / 127, q = roundf(x / d) ---- */

static void q8_0_from_f32(const float *x, void *vy, int64_t n) {
    quant_block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        const float d = block_absmax(x, NULL) / 127;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = f2h(d);
        for (int j = 0; j < QK; j++) y[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

static void q8_0_to_f32(const void *vx, float *y, int64_t n) {
    const quant_block_q8_0 *x = vx;
    for (int64_t i = 0; i < n / QK; i++, y += QK) {
        const float d = h2f(x[i].d);
        for (int j = 0; j < QK; j++) y[j] = x[i].qs[j] * d;
    }
}

static void dot_q8_0_q8_0(int n, float *s, const void *vx, const void *vy) {
    const quant_block_q8_0 *x = vx, *y = vy;
    float sum = 0.0f;
    for (int i = 0; i < n / QK; i++) {
        int acc = 0;
        for (int j = 0; j < QK; j++) acc += x[i].qs[j] * y[i].qs[j];
        sum += (float)acc * (h2f(x[i].d) * h2f(y[i].d));
    }
    *s = sum;
}

static void q8_1_from_f32(const float *x, void *vy, int64_t n) {
    quant_block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        const float d = block_absmax(x, NULL) / 127;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = f2h(d);
        int sum = 0;
        for (int j = 0; j < QK; j++) {
            y[i].qs[j] = (int8_t)roundf(x[j] * id);
            sum += y[i].qs[j];
        }
        y[i].s = f2h((float)sum * d);
    }
}

static void q8_1_to_f32(const void *vx, float *y, int64_t n) {
    const quant_block_q8_1 *x = vx;
    for (int64_t i = 0; i < n / QK; i++, y += QK) {
        const float d = h2f(x[i].d);
        for (int j = 0; j < QK; j++) y[j] = x[i].qs[j] * d;
    }
}

/* ---- table ---- */

void quant_fill_legacy(quant_traits *tab) {
    tab[QUANT_F32] = quant_traits_ref("F32", 1, 4, QUANT_F32, f32_to_f32, f32_from_f32, dot_f32);
    tab[QUANT_F16] = quant_traits_ref("F16", 1, 2, QUANT_F16, f16_to_f32, f16_from_f32, dot_f16);
    tab[QUANT_BF16] = quant_traits_ref("BF16", 1, 2, QUANT_BF16, bf16_to_f32, bf16_from_f32, dot_bf16);
    tab[QUANT_Q4_0] =
        quant_traits_ref("Q4_0", QK, sizeof(quant_block_q4_0), QUANT_Q8_0, q4_0_to_f32, q4_0_from_f32, dot_q4_0_q8_0);
    tab[QUANT_Q4_1] =
        quant_traits_ref("Q4_1", QK, sizeof(quant_block_q4_1), QUANT_Q8_1, q4_1_to_f32, q4_1_from_f32, dot_q4_1_q8_1);
    tab[QUANT_Q5_0] =
        quant_traits_ref("Q5_0", QK, sizeof(quant_block_q5_0), QUANT_Q8_0, q5_0_to_f32, q5_0_from_f32, dot_q5_0_q8_0);
    tab[QUANT_Q5_1] =
        quant_traits_ref("Q5_1", QK, sizeof(quant_block_q5_1), QUANT_Q8_1, q5_1_to_f32, q5_1_from_f32, dot_q5_1_q8_1);
    tab[QUANT_Q8_0] =
        quant_traits_ref("Q8_0", QK, sizeof(quant_block_q8_0), QUANT_Q8_0, q8_0_to_f32, q8_0_from_f32, dot_q8_0_q8_0);
    /* Q8_1 only ever holds activations: no weight-side dot kernel. */
    tab[QUANT_Q8_1] =
        quant_traits_ref("Q8_1", QK, sizeof(quant_block_q8_1), QUANT_Q8_1, q8_1_to_f32, q8_1_from_f32, NULL);
}
