/* NEON twins of the image kernels (conv.h): the image GEMM's 6 x 16 tile
 * (one fma per output and k, in order: the scalar twin's fmaf chains bit
 * for bit) and its packer of weight rows (4 x 4 transposes, exact
 * widening); the group norm with the same double sums in 2-lane
 * accumulators, the affine map by fma and kern_exp_attn's e^x for the SiLU;
 * the tanh GELU as the AVX2 twin computes it. */
#include "kernels/conv.h"

#include "kernels/level.h"
#include "kernels/neon.h"

#include <math.h>
#include <string.h>

/* Rows i < MR of c (16 columns) += a rows . the panel bp [kc][16]. */
static inline __attribute__((always_inline)) void tile(const int MR, int kc, const float *a, size_t lda,
                                                       const float *bp, float *c, size_t ldc) {
    float32x4_t acc[KERN_GEMM_MR][4];
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) acc[i][q] = vld1q_f32(c + (size_t)i * ldc + 4 * q);
    for (int k = 0; k < kc; k++, bp += 16) {
        const float32x4_t b0 = vld1q_f32(bp), b1 = vld1q_f32(bp + 4), b2 = vld1q_f32(bp + 8), b3 = vld1q_f32(bp + 12);
#pragma GCC unroll 6
        for (int i = 0; i < MR; i++) {
            const float av = a[(size_t)i * lda + (size_t)k];
            acc[i][0] = vfmaq_n_f32(acc[i][0], b0, av);
            acc[i][1] = vfmaq_n_f32(acc[i][1], b1, av);
            acc[i][2] = vfmaq_n_f32(acc[i][2], b2, av);
            acc[i][3] = vfmaq_n_f32(acc[i][3], b3, av);
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) vst1q_f32(c + (size_t)i * ldc + 4 * q, acc[i][q]);
}

static void tile_any(int mr, int kc, const float *a, size_t lda, const float *bp, float *c, size_t ldc) {
    switch (mr) {
    case 1: tile(1, kc, a, lda, bp, c, ldc); break;
    case 2: tile(2, kc, a, lda, bp, c, ldc); break;
    case 3: tile(3, kc, a, lda, bp, c, ldc); break;
    case 4: tile(4, kc, a, lda, bp, c, ldc); break;
    case 5: tile(5, kc, a, lda, bp, c, ldc); break;
    default: tile(6, kc, a, lda, bp, c, ldc); break;
    }
}

void kern_gemm_tile_neon(int mr, int nr, int kc, const float *a, size_t lda, const float *bp, float *c, size_t ldc) {
    int j = 0;
    for (; j + 16 <= nr; j += 16, bp += (size_t)kc * 16) tile_any(mr, kc, a, lda, bp, c + j, ldc);
    if (j == nr) return;
    /* the last columns: through a full-width copy (the panel's extra
     * columns are zero) */
    float t[KERN_GEMM_MR * 16] = {0};
    for (int i = 0; i < mr; i++) memcpy(t + 16 * i, c + (size_t)i * ldc + j, (size_t)(nr - j) * sizeof *t);
    tile_any(mr, kc, a, lda, bp, t, 16);
    for (int i = 0; i < mr; i++) memcpy(c + (size_t)i * ldc + j, t + 16 * i, (size_t)(nr - j) * sizeof *t);
}

/* 4 floats of a row at element k, widened exactly. */
static inline float32x4_t load4(int type, const uint8_t *row, int k) {
    if (type == QUANT_F16) return kn_load_h4((const uint16_t *)row + k);
    if (type == QUANT_BF16) return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16((const uint16_t *)row + k), 16));
    return vld1q_f32((const float *)row + k);
}

static float elem1(int type, const uint8_t *row, int k) {
    if (type == QUANT_F16) return kn_h2f(((const uint16_t *)row)[k]);
    if (type == QUANT_BF16) return quant_bf16_to_f32(((const uint16_t *)row)[k]);
    return ((const float *)row)[k];
}

/* ROWS packer: 4 rows x 4 k at a time, transposed in registers. */
void kern_gemm_pack_rows_neon(const kern_gemm *g, int k0, int kc, int n0, int nc, float *panel) {
    const int type = g->b_type;
    for (int p = 0; p * 16 < nc; p++)
        for (int h = 0; h < 4; h++) {
            const int j0 = 16 * p + 4 * h, col = n0 + j0;
            float *d = panel + (size_t)p * (size_t)kc * 16 + 4 * (size_t)h;
            int rows = nc - j0 < 4 ? nc - j0 : 4;
            if (g->n - col < rows) rows = g->n - col;
            if (rows < 0) rows = 0;
            const uint8_t *r[4];
            for (int i = 0; i < rows; i++) r[i] = (const uint8_t *)g->b + (size_t)(col + i) * g->ldb;
            int k = 0;
            if (rows == 4)
                for (; k + 4 <= kc; k += 4) {
                    const float32x4_t v0 = load4(type, r[0], k0 + k), v1 = load4(type, r[1], k0 + k),
                                      v2 = load4(type, r[2], k0 + k), v3 = load4(type, r[3], k0 + k);
                    /* rows (v0 .. v3) to columns: element k + i of every row */
                    const float32x4_t t0 = vtrn1q_f32(v0, v1), t1 = vtrn2q_f32(v0, v1), t2 = vtrn1q_f32(v2, v3),
                                      t3 = vtrn2q_f32(v2, v3);
                    const float64x2_t u0 = vreinterpretq_f64_f32(t0), u1 = vreinterpretq_f64_f32(t1),
                                      u2 = vreinterpretq_f64_f32(t2), u3 = vreinterpretq_f64_f32(t3);
                    vst1q_f32(d + (size_t)k * 16, vreinterpretq_f32_f64(vtrn1q_f64(u0, u2)));
                    vst1q_f32(d + (size_t)(k + 1) * 16, vreinterpretq_f32_f64(vtrn1q_f64(u1, u3)));
                    vst1q_f32(d + (size_t)(k + 2) * 16, vreinterpretq_f32_f64(vtrn2q_f64(u0, u2)));
                    vst1q_f32(d + (size_t)(k + 3) * 16, vreinterpretq_f32_f64(vtrn2q_f64(u1, u3)));
                }
            for (; k < kc; k++)
                for (int i = 0; i < 4; i++) d[(size_t)k * 16 + (size_t)i] = i < rows ? elem1(type, r[i], k0 + k) : 0.0f;
        }
}

void kern_groupnorm_neon(const kern_gn *g, const float *x, float *y, int grp) {
    const int cpg = g->c / g->groups;
    const size_t n = (size_t)cpg * (size_t)g->hw, off = (size_t)grp * n;
    const float *xs = x + off;
    float64x2_t a0 = vdupq_n_f64(0.0), a1 = a0;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const float32x4_t v = vld1q_f32(xs + i);
        a0 = vaddq_f64(a0, vcvt_f64_f32(vget_low_f32(v)));
        a1 = vaddq_f64(a1, vcvt_high_f64_f32(v));
    }
    double s = vaddvq_f64(vaddq_f64(a0, a1));
    for (; i < n; i++) s += xs[i];
    const double mean = s / (double)n;
    const float64x2_t mv = vdupq_n_f64(mean);
    a0 = a1 = vdupq_n_f64(0.0);
    for (i = 0; i + 4 <= n; i += 4) {
        const float32x4_t v = vld1q_f32(xs + i);
        const float64x2_t d0 = vsubq_f64(vcvt_f64_f32(vget_low_f32(v)), mv), d1 = vsubq_f64(vcvt_high_f64_f32(v), mv);
        a0 = vfmaq_f64(a0, d0, d0);
        a1 = vfmaq_f64(a1, d1, d1);
    }
    double var = vaddvq_f64(vaddq_f64(a0, a1));
    for (; i < n; i++) {
        const double d = xs[i] - mean;
        var += d * d;
    }
    const float inv = (float)(1.0 / sqrt(var / (double)n + g->eps)), m = (float)mean;
    for (int cc = 0; cc < cpg; cc++) {
        const int ch = grp * cpg + cc;
        const float a = g->w ? g->w[ch] * inv : inv;
        const float b = (g->b ? g->b[ch] : 0.0f) - m * a;
        const float *xc = xs + (size_t)cc * (size_t)g->hw;
        float *yc = y + off + (size_t)cc * (size_t)g->hw;
        const float32x4_t va = vdupq_n_f32(a), vb = vdupq_n_f32(b), one = vdupq_n_f32(1.0f);
        int k = 0;
        for (; k + 4 <= g->hw; k += 4) {
            float32x4_t t = vfmaq_f32(vb, vld1q_f32(xc + k), va);
            if (g->silu) t = vdivq_f32(t, vaddq_f32(one, kn_exp4(vnegq_f32(t))));
            vst1q_f32(yc + k, t);
        }
        for (; k < g->hw; k++) {
            const float t = fmaf(xc[k], a, b);
            yc[k] = g->silu ? t / (1.0f + expf(-t)) : t;
        }
    }
}

void kern_gelu_tanh_neon(float *x, size_t n) {
    const float32x4_t c = vdupq_n_f32(-2.0f * 0.7978845608028654f), c3 = vdupq_n_f32(0.044715f),
                      one = vdupq_n_f32(1.0f);
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const float32x4_t v = vld1q_f32(x + i);
        const float32x4_t u = vmulq_f32(c, vfmaq_f32(v, vmulq_f32(c3, v), vmulq_f32(v, v)));
        vst1q_f32(x + i, vdivq_f32(v, vaddq_f32(one, kn_exp4(u))));
    }
    const float cs = -2.0f * 0.7978845608028654f;
    for (; i < n; i++) {
        const float v = x[i];
        x[i] = v / (1.0f + expf(cs * (v + 0.044715f * v * v * v)));
    }
}
