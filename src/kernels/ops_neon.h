/*
 * ops_neon.h — the body of the NEON twins of the ops.c kernels (attention
 * over an F16 or Q8_0 cache, the F16 row conversions, RMS norm, SwiGLU, the
 * residual add and neox RoPE), included by ops_neon.c (the neon level) and
 * ops_dotprod.c (the dotprod level, built with FEAT_DotProd, whose Q8_0
 * block dots take sdot); each defines its kern_ops table from the static
 * functions here.  test_kernels compares every level's set to the scalar
 * one as it does the AVX2 set.
 *
 * Numerics kept from the scalar kernels:
 *   attn_f16  query by query as ops.c: scores by the F16 dot in its order
 *             (4 chains of 8 lanes, here two 4-lane vectors each, fma over
 *             whole 32-element steps, the fold of ops.c, the rest in
 *             double); F16 accumulator rescaled and updated one multiply /
 *             one fma per element, rounded to F16 after each; float
 *             accumulator: weights by kern_exp_attn's steps, one fma per
 *             element and position in position order: bit for bit
 *   attn_q8   exact int8 block dots (widening multiplies or sdot, integer
 *             sums in any order), the scale chain and weights as the scalar
 *             loop, v * dv exact then one fma per element: bit for bit
 *   rmsnorm   sum of squares in double (two lanes), then (x * scale) * w
 *   swiglu    g / (1 + e^-g) * u with kern_exp_attn's polynomial (about 1 ulp)
 *   add, rope_neox, the conversions: bit for bit
 */
#ifndef KILN_KERNELS_OPS_NEON_H
#define KILN_KERNELS_OPS_NEON_H

#include "kernels/ops.h"

#include "kernels/level.h"
#include "kernels/neon.h"
#include "quant/quant.h"

#include <math.h>
#include <string.h>

static void f32_to_f16_row(const float *x, uint16_t *y, int n) {
    int i = 0;
    for (; i + 4 <= n; i += 4) kn_store_h4(y + i, vld1q_f32(x + i));
    for (; i < n; i++) y[i] = kn_f2h(x[i]);
}

static void round_f16_row(const float *x, float *y, int n) {
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, kn_rnd16(vld1q_f32(x + i)));
    for (; i < n; i++) y[i] = kn_h2f(kn_f2h(x[i]));
}

/* kern_dot_f16 bit for bit: chain j (of 4) lane l (of 8) takes elements
 * 32 s + 8 j + l; lanes 0-3 of a chain in c[2 j], 4-7 in c[2 j + 1]. */
static float dot_f16(const uint16_t *a, const float *b, int n) {
    const int np = n & ~31;
    double s = 0.0;
    if (np) {
        float32x4_t c[8];
        for (int j = 0; j < 8; j++) c[j] = vdupq_n_f32(0.0f);
        for (int i = 0; i < np; i += 32)
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) c[j] = vfmaq_f32(c[j], kn_load_h4(a + i + 4 * j), vld1q_f32(b + i + 4 * j));
        /* x = (a0 + a2) + (a1 + a3) per lane */
        const float32x4_t lo = vaddq_f32(vaddq_f32(c[0], c[4]), vaddq_f32(c[2], c[6]));
        const float32x4_t hi = vaddq_f32(vaddq_f32(c[1], c[5]), vaddq_f32(c[3], c[7]));
        const float f = kn_fold_pairs(lo, hi);
        if (np == n) return f;
        s = (double)f;
    }
    for (int i = np; i < n; i++) s += (double)(kn_h2f(a[i]) * b[i]);
    return (float)s;
}

/* y = f16(f32(y) * s) */
static void scale_f16(uint16_t *y, float s, int n) {
    const float32x4_t vs = vdupq_n_f32(s);
    int i = 0;
    for (; i + 4 <= n; i += 4) kn_store_h4(y + i, vmulq_f32(kn_load_h4(y + i), vs));
    for (; i < n; i++) y[i] = kn_f2h(kn_h2f(y[i]) * s);
}

/* y = f16(fma(x, w, y)) */
static void mad_f16(uint16_t *y, const uint16_t *x, float w, int n) {
    const float32x4_t vw = vdupq_n_f32(w);
    int i = 0;
    for (; i + 4 <= n; i += 4) kn_store_h4(y + i, vfmaq_f32(kn_load_h4(y + i), kn_load_h4(x + i), vw));
    for (; i < n; i++) y[i] = kn_f2h(fmaf(kn_h2f(x[i]), w, kn_h2f(y[i])));
}

/* acc_f32 = 1 (ops.h): every score, the maximum, the weights, then the
 * float accumulator in position order. */
static void attn_f32acc_one(const kern_attn_f16 *a) {
    const int hd = a->hd, n = a->n_pos;
    float *qr = a->scratch, *acc = qr + hd, *sc = qr + 2 * hd, *w = sc + n;
    round_f16_row(a->q, qr, hd);
    float M = -INFINITY;
    for (int t = 0; t < n; t++) {
        sc[t] = dot_f16(a->k + kern_attn_row(a, t), qr, hd) * a->scale;
        M = sc[t] > M ? sc[t] : M;
    }
    const float32x4_t vm = vdupq_n_f32(M);
    int t = 0;
    for (; t + 4 <= n; t += 4) vst1q_f32(w + t, kn_exp4(vsubq_f32(vld1q_f32(sc + t), vm)));
    for (; t < n; t++) w[t] = kern_exp_attn(sc[t] - M);
    float S = 0.0f;
    for (t = 0; t < n; t++) S += w[t];
    memset(acc, 0, (size_t)hd * sizeof *acc);
    for (t = 0; t < n; t++) {
        const uint16_t *vr = a->v + kern_attn_row(a, t);
        const float32x4_t vw = vdupq_n_f32(w[t]);
        int d = 0;
        for (; d + 4 <= hd; d += 4) vst1q_f32(acc + d, vfmaq_f32(vld1q_f32(acc + d), kn_load_h4(vr + d), vw));
        for (; d < hd; d++) acc[d] = fmaf(kn_h2f(vr[d]), w[t], acc[d]);
    }
    const float inv = kern_attn_inv(S, M, a->sink);
    const float32x4_t vi = vdupq_n_f32(inv);
    int d = 0;
    for (; d + 4 <= hd; d += 4) vst1q_f32(a->out + d, vmulq_f32(vld1q_f32(acc + d), vi));
    for (; d < hd; d++) a->out[d] = acc[d] * inv;
}

/* The F16 flash-attention scheme of ops.c, one query. */
static void attn_f16_one(const kern_attn_f16 *a) {
    if (a->acc_f32) {
        attn_f32acc_one(a);
        return;
    }
    const int hd = a->hd;
    float *qr = a->scratch;
    uint16_t *acc = (uint16_t *)(qr + hd);
    round_f16_row(a->q, qr, hd);
    memset(acc, 0, (size_t)hd * sizeof *acc);
    float M = -INFINITY, S = 0.0f;
    for (int t = 0; t < a->n_pos; t++) {
        const size_t row = kern_attn_row(a, t);
        const float sc = dot_f16(a->k + row, qr, hd) * a->scale;
        float ms = 1.0f, vs = 1.0f;
        if (sc > M) {
            const float old = M;
            M = sc;
            ms = expf(old - M);
            scale_f16(acc, ms, hd);
        } else {
            vs = expf(sc - M);
        }
        mad_f16(acc, a->v + row, vs, hd);
        S = S * ms + vs;
    }
    const float inv = kern_attn_inv(S, M, a->sink);
    const float32x4_t vi = vdupq_n_f32(inv);
    int d = 0;
    for (; d + 4 <= hd; d += 4) vst1q_f32(a->out + d, vmulq_f32(kn_load_h4(acc + d), vi));
    for (; d < hd; d++) a->out[d] = kn_h2f(acc[d]) * inv;
}

static void attn_f16(const kern_attn_f16 *a) {
    for (int u = 0; u < a->nt; u++)
        for (int j = 0; j < a->nq; j++) {
            const kern_attn_f16 one = kern_attn_f16_query(a, u, j);
            attn_f16_one(&one);
        }
}

/* The exact sum of 32 int8 products. */
static inline int32_t dot_i8x32(const int8_t *x, const int8_t *y) {
    const int8x16_t x0 = vld1q_s8(x), x1 = vld1q_s8(x + 16), y0 = vld1q_s8(y), y1 = vld1q_s8(y + 16);
#if defined(__ARM_FEATURE_DOTPROD)
    return vaddvq_s32(vdotq_s32(vdotq_s32(vdupq_n_s32(0), x0, y0), x1, y1));
#else
    int32x4_t s = vpaddlq_s16(vmull_s8(vget_low_s8(x0), vget_low_s8(y0)));
    s = vpadalq_s16(s, vmull_high_s8(x0, y0));
    s = vpadalq_s16(s, vmull_s8(vget_low_s8(x1), vget_low_s8(y1)));
    s = vpadalq_s16(s, vmull_high_s8(x1, y1));
    return vaddvq_s32(s);
#endif
}

/* acc[0..31] = fma(q * dv, w, acc), q the 32 int8 of a block (q * dv exact) */
static inline void mad_q8(float *acc, const int8_t *q, float dv, float w) {
    const float32x4_t vd = vdupq_n_f32(dv), vw = vdupq_n_f32(w);
    for (int h = 0; h < 32; h += 16) {
        const int8x16_t b = vld1q_s8(q + h);
        const int16x8_t lo = vmovl_s8(vget_low_s8(b)), hi = vmovl_high_s8(b);
        const int32x4_t i4[4] = {vmovl_s16(vget_low_s16(lo)), vmovl_high_s16(lo), vmovl_s16(vget_low_s16(hi)),
                                 vmovl_high_s16(hi)};
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            float *p = acc + h + 4 * k;
            vst1q_f32(p, vfmaq_f32(vld1q_f32(p), vmulq_f32(vcvtq_f32_s32(i4[k]), vd), vw));
        }
    }
}

/* One query against a Q8_0 cache, the loops of ops.h. */
static void attn_q8_one(const kern_attn_q8 *a) {
    const int hd = a->hd, n = a->n_pos, nb = hd / 32;
    quant_block_q8_0 *qq = (quant_block_q8_0 *)a->scratch;
    float *acc = a->scratch + hd, *sc = a->scratch + 2 * hd, *w = sc + n;
    quant_get(QUANT_Q8_0)->from_f32(a->q, qq, hd);
    float dq[8];
    for (int b = 0; b < nb; b++) dq[b] = kn_h2f(qq[b].d);
    float M = -INFINITY;
    for (int t = 0; t < n; t++) {
        const quant_block_q8_0 *kb = (const quant_block_q8_0 *)(a->k + kern_attn_q8_row(a, t));
        float s = 0.0f;
        for (int b = 0; b < nb; b++) s = fmaf((float)dot_i8x32(qq[b].qs, kb[b].qs), dq[b] * kn_h2f(kb[b].d), s);
        sc[t] = s * a->scale;
        M = sc[t] > M ? sc[t] : M;
    }
    const float32x4_t vm = vdupq_n_f32(M);
    int t = 0;
    for (; t + 4 <= n; t += 4) vst1q_f32(w + t, kn_exp4(vsubq_f32(vld1q_f32(sc + t), vm)));
    for (; t < n; t++) w[t] = kern_exp_attn(sc[t] - M);
    float S = 0.0f;
    for (t = 0; t < n; t++) S += w[t];
    memset(acc, 0, (size_t)hd * sizeof *acc);
    for (t = 0; t < n; t++) {
        const quant_block_q8_0 *vb = (const quant_block_q8_0 *)(a->v + kern_attn_q8_row(a, t));
        for (int b = 0; b < nb; b++) mad_q8(acc + 32 * b, vb[b].qs, kn_h2f(vb[b].d), w[t]);
    }
    const float32x4_t vi = vdupq_n_f32(kern_attn_inv(S, M, a->sink));
    for (int d = 0; d < hd; d += 4) vst1q_f32(a->out + d, vmulq_f32(vld1q_f32(acc + d), vi));
}

static void attn_q8(const kern_attn_q8 *a) {
    for (int u = 0; u < a->nt; u++)
        for (int j = 0; j < a->nq; j++) {
            const kern_attn_q8 one = kern_attn_q8_query(a, u, j);
            attn_q8_one(&one);
        }
}

static void rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    float64x2_t s0 = vdupq_n_f64(0.0), s1 = s0;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        const float32x4_t v = vld1q_f32(x + i);
        const float64x2_t lo = vcvt_f64_f32(vget_low_f32(v)), hi = vcvt_high_f64_f32(v);
        s0 = vfmaq_f64(s0, lo, lo); /* exact: a float squared fits in a double */
        s1 = vfmaq_f64(s1, hi, hi);
    }
    double ss = vaddvq_f64(vaddq_f64(s0, s1));
    for (; i < n; i++) ss += (double)x[i] * x[i];
    const float scale = (float)(1.0 / sqrt(ss / n + eps));
    const float32x4_t vs = vdupq_n_f32(scale);
    i = 0;
    if (w) {
        for (; i + 4 <= n; i += 4) vst1q_f32(out + i, vmulq_f32(vmulq_f32(vld1q_f32(x + i), vs), vld1q_f32(w + i)));
        for (; i < n; i++) out[i] = x[i] * scale * w[i];
    } else {
        for (; i + 4 <= n; i += 4) vst1q_f32(out + i, vmulq_f32(vld1q_f32(x + i), vs));
        for (; i < n; i++) out[i] = x[i] * scale;
    }
}

static void swiglu(float *g, const float *u, int n) {
    const float32x4_t one = vdupq_n_f32(1.0f);
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        const float32x4_t v = vld1q_f32(g + i);
        const float32x4_t e = kn_exp4(vnegq_f32(v));
        vst1q_f32(g + i, vmulq_f32(vdivq_f32(v, vaddq_f32(one, e)), vld1q_f32(u + i)));
    }
    for (; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static void add(float *y, const float *x, int n) {
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vaddq_f32(vld1q_f32(y + i), vld1q_f32(x + i)));
    for (; i < n; i++) y[i] += x[i];
}

static void rope_neox(const float *cs, float *x, int n_heads, int head_dim, int n_rot) {
    const int half = n_rot / 2;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (long)h * head_dim;
        int i = 0;
        for (; i + 4 <= half; i += 4) {
            const float32x4x2_t t = vld2q_f32(cs + 2 * i); /* val[0] the cosines, val[1] the sines */
            const float32x4_t c = t.val[0], s = t.val[1];
            const float32x4_t x0 = vld1q_f32(v + i), x1 = vld1q_f32(v + i + half);
            /* two roundings each, as the reference */
            vst1q_f32(v + i, vsubq_f32(vmulq_f32(x0, c), vmulq_f32(x1, s)));
            vst1q_f32(v + i + half, vaddq_f32(vmulq_f32(x0, s), vmulq_f32(x1, c)));
        }
        for (; i < half; i++) {
            const float c = cs[2 * i], s = cs[2 * i + 1], x0 = v[i], x1 = v[i + half];
            const float m0 = x0 * c, m1 = x1 * s, m2 = x0 * s, m3 = x1 * c;
            v[i] = m0 - m1;
            v[i + half] = m2 + m3;
        }
    }
}

/* the set, for the including file's table */
#define KN_OPS_SET                                                                                                  \
    {                                                                                                               \
        .attn_f16 = attn_f16, .attn_q8 = attn_q8, .f32_to_f16_row = f32_to_f16_row, .round_f16_row = round_f16_row, \
        .rmsnorm = rmsnorm, .swiglu = swiglu, .add = add, .rope_neox = rope_neox                                    \
    }

#endif
