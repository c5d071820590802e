/*
 * K-quants (Q2_K..Q6_K, Q8_K) and the IQ4 types: scalar dequantizers,
 * reference quantizers and reference dot kernels.
 *
 * The quantizers reproduce, operation for operation, what llama.cpp writes
 * for these types when no importance matrix is given, so files we write are
 * bit-identical to llama-quantize output and read back the same way.  That
 * is why the float expressions below keep their exact evaluation order: a
 * reordered sum or a fused multiply-add would change rounding and, now and
 * then, a quant.  (This file is compiled without FMA flags on purpose.)
 *
 * Layouts are described in kquants_layout.h.
 */
#include <math.h>
#include <string.h>

#include "kquants_layout.h"

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

/* Groups whose largest |x| is below this are treated as all zero. */
#define GROUP_EPS 1e-15f

/* Round to nearest, ties to even, for |v| < 2^22: adding 1.5*2^23 pushes
 * the integer part into the low mantissa bits, which the FPU rounds. */
static inline int round_int(float v) {
    float t = v + 12582912.f;
    int32_t i;
    memcpy(&i, &t, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

static inline float f16(uint16_t h) { return quant_f16_to_f32(h); }

/* ---------------------------------------------------------------------- */
/* Scale search helpers                                                   */
/* ---------------------------------------------------------------------- */

/* Symmetric quants in [-nmax, nmax-1] for n values, weighted by x^2; tries
 * 19 scales around nmax/max and keeps the one with the best weighted fit.
 * L receives quant + nmax.  Returns the scale (x ~ scale * (L - nmax)). */
static float sym_quants_x2(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = round_int(iscale * x[i]);
        l = MAX(-nmax, MIN(nmax - 1, l));
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            int l = round_int(iscale * x[i]);
            l = MAX(-nmax, MIN(nmax - 1, l));
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i) {
                int l = round_int(iscale * x[i]);
                L[i] = (int8_t)(nmax + MAX(-nmax, MIN(nmax - 1, l)));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Q3_K's variant: start from nmax/max, then up to 5 passes of coordinate
 * descent moving single quants while the x^2-weighted fit improves.
 * L receives quant + nmax. */
static float sym_quants_q3(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = round_int(iscale * x[i]);
        l = MAX(-nmax, MIN(nmax - 1, l));
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int changed = 0;
        for (int i = 0; i < n; ++i) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                int nl = round_int(x[i] * sl2 / slx);
                nl = MAX(-nmax, MIN(nmax - 1, nl));
                if (nl != L[i]) {
                    slx += w * x[i] * nl;
                    sl2 += w * nl * nl;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)nl;
                        sumlx = slx;
                        suml2 = sl2;
                        ++changed;
                    }
                }
            }
        }
        if (!changed) break;
    }
    for (int i = 0; i < n; ++i) L[i] = (int8_t)(L[i] + nmax);
    return sumlx / suml2;
}

/* Asymmetric quants in [0, nmax]: x ~ scale*L - the_min.  Starts from the
 * min/max grid, then tries nstep+1 grid sizes (nmax + rmin + rdelta*is)
 * and for each solves the weighted least-squares scale and offset, keeping
 * the one with the smallest weighted error (|diff| if use_mad, else
 * diff^2).  The offset is kept <= 0 (the_min >= 0). */
static float asym_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min,
                         uint8_t *Laux, float rmin, float rdelta, int nstep, int use_mad) {
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_err = 0;
    for (int i = 0; i < n; ++i) {
        int l = round_int(iscale * (x[i] - min));
        L[i] = (uint8_t)MAX(0, MIN(nmax, l));
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_err += weights[i] * diff;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            int l = round_int(iscale * (x[i] - min));
            l = MAX(0, MIN(nmax, l));
            Laux[i] = (uint8_t)l;
            float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float err = 0;
            for (int i = 0; i < n; ++i) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                err += weights[i] * diff;
            }
            if (err < best_err) {
                memcpy(L, Laux, (size_t)n);
                best_err = err;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* ---------------------------------------------------------------------- */
/* Unpacking to natural order (index = weight position in the block)     */
/* ---------------------------------------------------------------------- */

/* 2-bit fields of Q2_K/Q3_K: weight e sits in byte 32*(e/128) + e%32 at
 * bit 2*((e/32)%4). */
static inline int low2(const uint8_t *qs, int e) { return (qs[32 * (e >> 7) + (e & 31)] >> (2 * ((e >> 5) & 3))) & 3; }

/* Q3_K's 16 signed 6-bit scales. */
static void q3_scales(const quant_block_q3_K *b, int sc[16]) {
    for (int j = 0; j < 16; ++j) {
        int lo = j < 8 ? b->scales[j] & 0xF : b->scales[j - 8] >> 4;
        int hi = (b->scales[8 + j % 4] >> (2 * (j / 4))) & 3;
        sc[j] = (lo | hi << 4) - 32;
    }
}

/* Q3_K quant of weight e, in -4..3. */
static inline int q3_quant(const quant_block_q3_K *b, int e) {
    int hb = (b->hmask[e & 31] >> (e >> 5)) & 1;
    return low2(b->qs, e) - (hb ? 0 : 4);
}

/* Q4_K/Q5_K low 4 bits of weight e. */
static inline int nib4(const uint8_t *qs, int e) {
    return (qs[32 * (e >> 6) + (e & 31)] >> (4 * ((e >> 5) & 1))) & 0xF;
}

static inline int q5_quant(const quant_block_q5_K *b, int e) {
    int bit = (b->qh[e & 31] >> (e >> 5)) & 1;
    return nib4(b->qs, e) | bit << 4;
}

/* Q6_K quant of weight e, in -32..31. */
static inline int q6_quant(const quant_block_q6_K *b, int e) {
    int h = e >> 7, k = (e >> 5) & 3, l = e & 31;
    int lo = (b->ql[64 * h + 32 * (k & 1) + l] >> (4 * (k >> 1))) & 0xF;
    int hi = (b->qh[32 * h + l] >> (2 * k)) & 3;
    return (lo | hi << 4) - 32;
}

/* IQ4 nibble of weight r within its 32-weight group starting at qs. */
static inline int iq4_code(const uint8_t *qs, int r) { return (qs[r & 15] >> (4 * (r >> 4))) & 0xF; }

static inline int iq4xs_scale(const quant_block_iq4_xs *b, int ib) {
    int lo = (b->scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF;
    int hi = (b->scales_h >> (2 * ib)) & 3;
    return (lo | hi << 4) - 32;
}

/* ---------------------------------------------------------------------- */
/* Q2_K                                                                   */
/* ---------------------------------------------------------------------- */

static void q2_K_to_f32(const void *vx, float *y, int64_t n) {
    const quant_block_q2_K *x = vx;
    for (int64_t i = 0; i < n / QUANT_QK_K; ++i, y += QUANT_QK_K) {
        float d = f16(x[i].d), dmin = f16(x[i].dmin);
        for (int j = 0; j < 16; ++j) {
            uint8_t sc = x[i].scales[j];
            float dl = d * (sc & 0xF), ml = dmin * (sc >> 4);
            for (int e = 16 * j; e < 16 * j + 16; ++e) y[e] = dl * low2(x[i].qs, e) - ml;
        }
    }
}

static void q2_K_from_f32(const float *x, void *vy, int64_t n) {
    quant_block_q2_K *y = vy;
    uint8_t L[QUANT_QK_K], Laux[16];
    float weights[16], mins[16], scales[16];
    const float q4scale = 15.f;

    for (int64_t i = 0; i < n / QUANT_QK_K; ++i, x += QUANT_QK_K) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < 16; ++j) {
            for (int l = 0; l < 16; ++l) weights[l] = fabsf(x[16 * j + l]);
            scales[j] = asym_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, 1);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        if (max_scale > 0) {
            float iscale = q4scale / max_scale;
            for (int j = 0; j < 16; ++j) y[i].scales[j] = (uint8_t)round_int(iscale * scales[j]);
            y[i].d = quant_f32_to_f16(max_scale / q4scale);
        } else {
            memset(y[i].scales, 0, sizeof y[i].scales);
            y[i].d = quant_f32_to_f16(0.f);
        }
        if (max_min > 0) {
            float iscale = q4scale / max_min;
            for (int j = 0; j < 16; ++j) y[i].scales[j] |= (uint8_t)(round_int(iscale * mins[j]) << 4);
            y[i].dmin = quant_f32_to_f16(max_min / q4scale);
        } else {
            y[i].dmin = quant_f32_to_f16(0.f);
        }
        /* Requantize against the scales as stored. */
        for (int j = 0; j < 16; ++j) {
            float d = f16(y[i].d) * (y[i].scales[j] & 0xF);
            if (!d) continue;
            float dm = f16(y[i].dmin) * (y[i].scales[j] >> 4);
            for (int ii = 0; ii < 16; ++ii) {
                int l = round_int((x[16 * j + ii] + dm) / d);
                L[16 * j + ii] = (uint8_t)MAX(0, MIN(3, l));
            }
        }
        for (int j = 0; j < QUANT_QK_K; j += 128)
            for (int l = 0; l < 32; ++l)
                y[i].qs[j / 4 + l] = (uint8_t)(L[j + l] | L[j + l + 32] << 2 | L[j + l + 64] << 4 | L[j + l + 96] << 6);
    }
}

static void q2_K_dot(int n, float *s, const void *vx, const void *vy) {
    const quant_block_q2_K *x = vx;
    const quant_block_q8_K *y = vy;
    float sum = 0;
    for (int i = 0; i < n / QUANT_QK_K; ++i) {
        int isum = 0, msum = 0;
        for (int j = 0; j < 16; ++j) {
            int dot = 0;
            for (int e = 16 * j; e < 16 * j + 16; ++e) dot += low2(x[i].qs, e) * y[i].qs[e];
            isum += (x[i].scales[j] & 0xF) * dot;
            msum += (x[i].scales[j] >> 4) * y[i].bsums[j];
        }
        sum += y[i].d * (f16(x[i].d) * isum - f16(x[i].dmin) * msum);
    }
    *s = sum;
}

/* ---------------------------------------------------------------------- */
/* Q3_K                                                                   */
/* ---------------------------------------------------------------------- */

static void q3_K_to_f32(const void *vx, float *y, int64_t n) {
    const quant_block_q3_K *x = vx;
    int sc[16];
    for (int64_t i = 0; i < n / QUANT_QK_K; ++i, y += QUANT_QK_K) {
        float d = f16(x[i].d);
        q3_scales(&x[i], sc);
        for (int j = 0; j < 16; ++j) {
            float dl = d * sc[j];
            for (int e = 16 * j; e < 16 * j + 16; ++e) y[e] = dl * q3_quant(&x[i], e);
        }
    }
}

static void q3_K_from_f32(const float *x, void *vy, int64_t n) {
    quant_block_q3_K *y = vy;
    int8_t L[QUANT_QK_K];
    float scales[16];
    int sc[16];

    for (int64_t i = 0; i < n / QUANT_QK_K; ++i, x += QUANT_QK_K) {
        float max_scale = 0, amax = 0;
        for (int j = 0; j < 16; ++j) {
            scales[j] = sym_quants_q3(16, 4, x + 16 * j, L + 16 * j);
            float a = fabsf(scales[j]);
            if (a > amax) {
                amax = a;
                max_scale = scales[j];
            }
        }
        memset(y[i].scales, 0, sizeof y[i].scales);
        if (max_scale) {
            float iscale = -32.f / max_scale;
            for (int j = 0; j < 16; ++j) {
                int8_t l = (int8_t)round_int(iscale * scales[j]);
                l = (int8_t)(MAX(-32, MIN(31, l)) + 32);
                if (j < 8)
                    y[i].scales[j] = l & 0xF;
                else
                    y[i].scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
                y[i].scales[j % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
            }
            y[i].d = quant_f32_to_f16(1 / iscale);
        } else {
            y[i].d = quant_f32_to_f16(0.f);
        }
        q3_scales(&y[i], sc);
        for (int j = 0; j < 16; ++j) {
            float d = f16(y[i].d) * sc[j];
            if (!d) continue;
            for (int ii = 0; ii < 16; ++ii) {
                int l = round_int(x[16 * j + ii] / d);
                L[16 * j + ii] = (int8_t)(MAX(-4, MIN(3, l)) + 4);
            }
        }
        memset(y[i].hmask, 0, sizeof y[i].hmask);
        for (int e = 0; e < QUANT_QK_K; ++e) {
            if (L[e] > 3) {
                y[i].hmask[e & 31] |= (uint8_t)(1 << (e >> 5));
                L[e] -= 4;
            }
        }
        for (int j = 0; j < QUANT_QK_K; j += 128)
            for (int l = 0; l < 32; ++l)
                y[i].qs[j / 4 + l] = (uint8_t)(L[j + l] | L[j + l + 32] << 2 | L[j + l + 64] << 4 | L[j + l + 96] << 6);
    }
}

static void q3_K_dot(int n, float *s, const void *vx, const void *vy) {
    const quant_block_q3_K *x = vx;
    const quant_block_q8_K *y = vy;
    int sc[16];
    float sum = 0;
    for (int i = 0; i < n / QUANT_QK_K; ++i) {
        q3_scales(&x[i], sc);
        int isum = 0;
        for (int j = 0; j < 16; ++j) {
            int dot = 0;
            for (int e = 16 * j; e < 16 * j + 16; ++e) dot += q3_quant(&x[i], e) * y[i].qs[e];
            isum += sc[j] * dot;
        }
        sum += y[i].d * f16(x[i].d) * isum;
    }
    *s = sum;
}

/* ---------------------------------------------------------------------- */
/* Q4_K and Q5_K (shared scale search and packing)                        */
/* ---------------------------------------------------------------------- */

/* Fits 8 sub-blocks of 32 with asymmetric quants in [0, nmax], stores
 * d, dmin and the 12-byte scale field, and leaves the final quants
 * (requantized against the stored scales) in L. */
static void qk45_block(const float *x, int nmax, float rmin, int nstep, uint16_t *dp, uint16_t *dminp,
                       uint8_t scales12[12], uint8_t L[QUANT_QK_K]) {
    uint8_t Laux[32];
    float weights[32], mins[8], scales[8];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; ++j) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; ++l) weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = asym_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep, 0);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < 8; ++j) {
        uint8_t ls = (uint8_t)round_int(inv_scale * scales[j]);
        uint8_t lm = (uint8_t)round_int(inv_min * mins[j]);
        ls = MIN(63, ls);
        lm = MIN(63, lm);
        if (j < 4) {
            scales12[j] = ls;
            scales12[j + 4] = lm;
        } else {
            scales12[j + 4] = (uint8_t)((ls & 0xF) | (lm & 0xF) << 4);
            scales12[j - 4] |= (uint8_t)((ls >> 4) << 6);
            scales12[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *dp = quant_f32_to_f16(max_scale / 63.f);
    *dminp = quant_f32_to_f16(max_min / 63.f);
    for (int j = 0; j < 8; ++j) {
        uint8_t sc, m;
        quant_scale_min_k4(j, scales12, &sc, &m);
        float d = f16(*dp) * sc;
        if (!d) continue;
        float dm = f16(*dminp) * m;
        for (int ii = 0; ii < 32; ++ii) {
            int l = round_int((x[32 * j + ii] + dm) / d);
            L[32 * j + ii] = (uint8_t)MAX(0, MIN(nmax, l));
        }
    }
}

static void q4_K_to_f32(const void *vx, float *y, int64_t n) {
    const quant_block_q4_K *x = vx;
    for (int64_t i = 0; i < n / QUANT_QK_K; ++i, y += QUANT_QK_K) {
        float d = f16(x[i].d), dmin = f16(x[i].dmin);
        for (int j = 0; j < 8; ++j) {
            uint8_t sc, m;
            quant_scale_min_k4(j, x[i].scales, &sc, &m);
            float dl = d * sc, ml = dmin * m;
            for (int e = 32 * j; e < 32 * j + 32; ++e) y[e] = dl * nib4(x[i].qs, e) - ml;
        }
    }
}

static void q4_K_from_f32(const float *x, void *vy, int64_t n) {
    quant_block_q4_K *y = vy;
    uint8_t L[QUANT_QK_K];
    for (int64_t i = 0; i < n / QUANT_QK_K; ++i, x += QUANT_QK_K) {
        memset(y[i].scales, 0, sizeof y[i].scales);
        qk45_block(x, 15, -1.f, 20, &y[i].d, &y[i].dmin, y[i].scales, L);
        for (int g = 0; g < 4; ++g)
            for (int l = 0; l < 32; ++l) y[i].qs[32 * g + l] = (uint8_t)(L[64 * g + l] | L[64 * g + 32 + l] << 4);
    }
}

static void q4_K_dot(int n, float *s, const void *vx, const void *vy) {
    const quant_block_q4_K *x = vx;
    const quant_block_q8_K *y = vy;
    float sum = 0;
    for (int i = 0; i < n / QUANT_QK_K; ++i) {
        int isum = 0, msum = 0;
        for (int j = 0; j < 8; ++j) {
            uint8_t sc, m;
            quant_scale_min_k4(j, x[i].scales, &sc, &m);
            int dot = 0;
            for (int e = 32 * j; e < 32 * j + 32; ++e) dot += nib4(x[i].qs, e) * y[i].qs[e];
            isum += sc * dot;
            msum += m * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        }
        sum += y[i].d * (f16(x[i].d) * isum - f16(x[i].dmin) * msum);
    }
    *s = sum;
}

static void q5_K_to_f32(const void *vx, float *y, int64_t n) {
    const quant_block_q5_K *x = vx;
    for (int64_t i = 0; i < n / QUANT_QK_K; ++i, y += QUANT_QK_K) {
        float d = f16(x[i].d), dmin = f16(x[i].dmin);
        for (int j = 0; j < 8; ++j) {
            uint8_t sc, m;
            quant_scale_min_k4(j, x[i].scales, &sc, &m);
            float dl = d * sc, ml = dmin * m;
            for (int e = 32 * j; e < 32 * j + 32; ++e) y[e] = dl * q5_quant(&x[i], e) - ml;
        }
    }
}

static void q5_K_from_f32(const float *x, void *vy, int64_t n) {
    quant_block_q5_K *y = vy;
    uint8_t L[QUANT_QK_K];
    for (int64_t i = 0; i < n / QUANT_QK_K; ++i, x += QUANT_QK_K) {
        memset(y[i].scales, 0, sizeof y[i].scales);
        qk45_block(x, 31, -0.5f, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
        memset(y[i].qh, 0, sizeof y[i].qh);
        for (int g = 0; g < 4; ++g) {
            for (int l = 0; l < 32; ++l) {
                int l1 = L[64 * g + l], l2 = L[64 * g + 32 + l];
                y[i].qh[l] |= (uint8_t)((l1 >> 4) << (2 * g) | (l2 >> 4) << (2 * g + 1));
                y[i].qs[32 * g + l] = (uint8_t)((l1 & 0xF) | (l2 & 0xF) << 4);
            }
        }
    }
}

static void q5_K_dot(int n, float *s, const void *vx, const void *vy) {
    const quant_block_q5_K *x = vx;
    const quant_block_q8_K *y = vy;
    float sum = 0;
    for (int i = 0; i < n / QUANT_QK_K; ++i) {
        int isum = 0, msum = 0;
        for (int j = 0; j < 8; ++j) {
            uint8_t sc, m;
            quant_scale_min_k4(j, x[i].scales, &sc, &m);
            int dot = 0;
            for (int e = 32 * j; e < 32 * j + 32; ++e) dot += q5_quant(&x[i], e) * y[i].qs[e];
            isum += sc * dot;
            msum += m * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        }
        sum += y[i].d * (f16(x[i].d) * isum - f16(x[i].dmin) * msum);
    }
    *s = sum;
}

/* ---------------------------------------------------------------------- */
/* Q6_K                                                                   */
/* ---------------------------------------------------------------------- */

static void q6_K_to_f32(const void *vx, float *y, int64_t n) {
    const quant_block_q6_K *x = vx;
    for (int64_t i = 0; i < n / QUANT_QK_K; ++i, y += QUANT_QK_K) {
        float d = f16(x[i].d);
        for (int e = 0; e < QUANT_QK_K; ++e) y[e] = d * x[i].scales[e / 16] * q6_quant(&x[i], e);
    }
}

static void q6_K_from_f32(const float *x, void *vy, int64_t n) {
    quant_block_q6_K *y = vy;
    int8_t L[QUANT_QK_K];
    float scales[16];

    for (int64_t i = 0; i < n / QUANT_QK_K; ++i, x += QUANT_QK_K) {
        float max_scale = 0, max_abs = 0;
        for (int j = 0; j < 16; ++j) {
            scales[j] = sym_quants_x2(16, 32, x + 16 * j, L + 16 * j);
            float a = fabsf(scales[j]);
            if (a > max_abs) {
                max_abs = a;
                max_scale = scales[j];
            }
        }
        if (max_abs < GROUP_EPS) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        float iscale = -128.f / max_scale;
        y[i].d = quant_f32_to_f16(1 / iscale);
        for (int j = 0; j < 16; ++j) y[i].scales[j] = (int8_t)MIN(127, round_int(iscale * scales[j]));
        for (int j = 0; j < 16; ++j) {
            float d = f16(y[i].d) * y[i].scales[j];
            if (!d) continue;
            for (int ii = 0; ii < 16; ++ii) {
                int l = round_int(x[16 * j + ii] / d);
                L[16 * j + ii] = (int8_t)(MAX(-32, MIN(31, l)) + 32);
            }
        }
        for (int h = 0; h < 2; ++h) {
            const int8_t *Lh = L + 128 * h;
            uint8_t *ql = y[i].ql + 64 * h, *qh = y[i].qh + 32 * h;
            for (int l = 0; l < 32; ++l) {
                ql[l] = (uint8_t)((Lh[l] & 0xF) | (Lh[l + 64] & 0xF) << 4);
                ql[l + 32] = (uint8_t)((Lh[l + 32] & 0xF) | (Lh[l + 96] & 0xF) << 4);
                qh[l] =
                    (uint8_t)(Lh[l] >> 4 | (Lh[l + 32] >> 4) << 2 | (Lh[l + 64] >> 4) << 4 | (Lh[l + 96] >> 4) << 6);
            }
        }
    }
}

static void q6_K_dot(int n, float *s, const void *vx, const void *vy) {
    const quant_block_q6_K *x = vx;
    const quant_block_q8_K *y = vy;
    float sum = 0;
    for (int i = 0; i < n / QUANT_QK_K; ++i) {
        int isum = 0;
        for (int j = 0; j < 16; ++j) {
            int dot = 0;
            for (int e = 16 * j; e < 16 * j + 16; ++e) dot += q6_quant(&x[i], e) * y[i].qs[e];
            isum += x[i].scales[j] * dot;
        }
        sum += y[i].d * f16(x[i].d) * isum;
    }
    *s = sum;
}

/* ---------------------------------------------------------------------- */
/* Q8_K                                                                   */
/* ---------------------------------------------------------------------- */

static void q8_K_to_f32(const void *vx, float *y, int64_t n) {
    const quant_block_q8_K *x = vx;
    for (int64_t i = 0; i < n / QUANT_QK_K; ++i, y += QUANT_QK_K)
        for (int e = 0; e < QUANT_QK_K; ++e) y[e] = x[i].d * x[i].qs[e];
}

/* Scale -127/max where max is the first element of largest magnitude, so
 * that element maps to -127 exactly; quants stay within [-127, 127]. */
static void q8_K_from_f32(const float *x, void *vy, int64_t n) {
    quant_block_q8_K *y = vy;
    for (int64_t i = 0; i < n / QUANT_QK_K; ++i, x += QUANT_QK_K) {
        float max = 0, amax = 0;
        for (int e = 0; e < QUANT_QK_K; ++e) {
            float a = fabsf(x[e]);
            if (a > amax) {
                amax = a;
                max = x[e];
            }
        }
        if (!amax) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        float iscale = -127.f / max;
        for (int e = 0; e < QUANT_QK_K; ++e) y[i].qs[e] = (int8_t)MIN(127, round_int(iscale * x[e]));
        for (int j = 0; j < 16; ++j) {
            int sum = 0;
            for (int e = 16 * j; e < 16 * j + 16; ++e) sum += y[i].qs[e];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

static void q8_K_dot(int n, float *s, const void *vx, const void *vy) {
    const quant_block_q8_K *x = vx;
    const quant_block_q8_K *y = vy;
    float sum = 0;
    for (int i = 0; i < n / QUANT_QK_K; ++i) {
        int isum = 0;
        for (int e = 0; e < QUANT_QK_K; ++e) isum += x[i].qs[e] * y[i].qs[e];
        sum += x[i].d * y[i].d * isum;
    }
    *s = sum;
}

/* ---------------------------------------------------------------------- */
/* IQ4_NL and IQ4_XS                                                      */
/* ---------------------------------------------------------------------- */

/* Index of the code value nearest to v (ties to the lower one). */
static int iq4_best_index(float v) {
    const int8_t *val = quant_iq4nl_values;
    if (v <= val[0]) return 0;
    if (v >= val[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (v < val[mid])
            hi = mid;
        else
            lo = mid;
    }
    return v - val[hi - 1] < val[hi] - v ? hi - 1 : hi;
}

/* Best x^2-weighted scale for 32 values against the code book, trying 15
 * scales (max / (values[0] + t), t = -7..7) beyond the first guess.  Fills
 * L with the codes of the first guess only (callers requantize).  Returns
 * 0 for an all-zero group. */
static float iq4_scale32(const float *xb, uint8_t *L) {
    const int8_t *values = quant_iq4nl_values;
    const int ntry = 7;
    float weight[32];
    float amax = 0, max = 0;
    for (int j = 0; j < 32; ++j) {
        weight[j] = xb[j] * xb[j];
        float ax = fabsf(xb[j]);
        if (ax > amax) {
            amax = ax;
            max = xb[j];
        }
    }
    if (amax < GROUP_EPS) return 0;
    float d = -max / values[0];
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; ++j) {
        int l = iq4_best_index(id * xb[j]);
        L[j] = (uint8_t)l;
        float q = values[l], w = weight[j];
        sumqx += w * q * xb[j];
        sumq2 += w * q * q;
    }
    d = sumqx / sumq2;
    float best = d * sumqx;
    for (int itry = -ntry; itry <= ntry; ++itry) {
        id = (itry + values[0]) / max;
        sumqx = sumq2 = 0;
        for (int j = 0; j < 32; ++j) {
            float q = values[iq4_best_index(id * xb[j])], w = weight[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

/* Packs 32 codes: byte l = L[l] | L[16 + l] << 4. */
static void iq4_pack32(const uint8_t *L, uint8_t *qs) {
    for (int j = 0; j < 16; ++j) qs[j] = (uint8_t)(L[j] | L[16 + j] << 4);
}

static void iq4_nl_to_f32(const void *vx, float *y, int64_t n) {
    const quant_block_iq4_nl *x = vx;
    for (int64_t i = 0; i < n / QUANT_QK4_NL; ++i, y += QUANT_QK4_NL) {
        float d = f16(x[i].d);
        for (int r = 0; r < 32; ++r) y[r] = d * quant_iq4nl_values[iq4_code(x[i].qs, r)];
    }
}

/* As llama-quantize writes IQ4_NL (the tried-scales search, not the
 * single-guess quantize_row_iq4_nl_ref of ggml). */
static void iq4_nl_from_f32(const float *x, void *vy, int64_t n) {
    quant_block_iq4_nl *y = vy;
    uint8_t L[32];
    for (int64_t i = 0; i < n / QUANT_QK4_NL; ++i, x += QUANT_QK4_NL) {
        float d = iq4_scale32(x, L);
        y[i].d = quant_f32_to_f16(d);
        float id = d ? 1 / d : 0;
        for (int j = 0; j < 32; ++j) L[j] = (uint8_t)iq4_best_index(id * x[j]);
        iq4_pack32(L, y[i].qs);
    }
}

static void iq4_nl_dot(int n, float *s, const void *vx, const void *vy) {
    const quant_block_iq4_nl *x = vx;
    const quant_block_q8_0 *y = vy;
    float sum = 0;
    for (int i = 0; i < n / QUANT_QK4_NL; ++i) {
        int isum = 0;
        for (int r = 0; r < 32; ++r) isum += quant_iq4nl_values[iq4_code(x[i].qs, r)] * y[i].qs[r];
        sum += f16(x[i].d) * f16(y[i].d) * isum;
    }
    *s = sum;
}

static void iq4_xs_to_f32(const void *vx, float *y, int64_t n) {
    const quant_block_iq4_xs *x = vx;
    for (int64_t i = 0; i < n / QUANT_QK_K; ++i) {
        float d = f16(x[i].d);
        for (int ib = 0; ib < 8; ++ib, y += 32) {
            float dl = d * iq4xs_scale(&x[i], ib);
            for (int r = 0; r < 32; ++r) y[r] = dl * quant_iq4nl_values[iq4_code(x[i].qs + 16 * ib, r)];
        }
    }
}

static void iq4_xs_from_f32(const float *x, void *vy, int64_t n) {
    quant_block_iq4_xs *y = vy;
    uint8_t L[32];
    float scales[8];
    for (int64_t i = 0; i < n / QUANT_QK_K; ++i, x += QUANT_QK_K) {
        float max_scale = 0, amax_scale = 0;
        for (int ib = 0; ib < 8; ++ib) {
            scales[ib] = iq4_scale32(x + 32 * ib, L);
            float a = fabsf(scales[ib]);
            if (a > amax_scale) {
                amax_scale = a;
                max_scale = scales[ib];
            }
        }
        float d = -max_scale / 32;
        y[i].d = quant_f32_to_f16(d);
        y[i].scales_h = 0;
        float id = d ? 1 / d : 0.f;
        for (int ib = 0; ib < 8; ++ib) {
            int l = round_int(id * scales[ib]);
            l = MAX(-32, MIN(31, l));
            float dl = d * l;
            float idl = dl ? 1 / dl : 0.f;
            const float *xb = x + 32 * ib;
            for (int j = 0; j < 32; ++j) L[j] = (uint8_t)iq4_best_index(idl * xb[j]);
            iq4_pack32(L, y[i].qs + 16 * ib);
            l += 32;
            if (ib % 2 == 0)
                y[i].scales_l[ib / 2] = (uint8_t)(l & 0xF);
            else
                y[i].scales_l[ib / 2] |= (uint8_t)((l & 0xF) << 4);
            y[i].scales_h |= (uint16_t)((l >> 4) << (2 * ib));
        }
    }
}

static void iq4_xs_dot(int n, float *s, const void *vx, const void *vy) {
    const quant_block_iq4_xs *x = vx;
    const quant_block_q8_K *y = vy;
    float sum = 0;
    for (int i = 0; i < n / QUANT_QK_K; ++i) {
        int isum = 0;
        for (int ib = 0; ib < 8; ++ib) {
            int dot = 0;
            for (int r = 0; r < 32; ++r)
                dot += quant_iq4nl_values[iq4_code(x[i].qs + 16 * ib, r)] * y[i].qs[32 * ib + r];
            isum += iq4xs_scale(&x[i], ib) * dot;
        }
        sum += y[i].d * f16(x[i].d) * isum;
    }
    *s = sum;
}

/* ---------------------------------------------------------------------- */
/* Table and SIMD selection                                               */
/* ---------------------------------------------------------------------- */

void quant_fill_kquants(quant_traits *tab) {
    tab[QUANT_Q2_K] = quant_traits_ref("Q2_K", QUANT_QK_K, sizeof(quant_block_q2_K), QUANT_Q8_K, q2_K_to_f32,
                                       q2_K_from_f32, q2_K_dot);
    tab[QUANT_Q3_K] = quant_traits_ref("Q3_K", QUANT_QK_K, sizeof(quant_block_q3_K), QUANT_Q8_K, q3_K_to_f32,
                                       q3_K_from_f32, q3_K_dot);
    tab[QUANT_Q4_K] = quant_traits_ref("Q4_K", QUANT_QK_K, sizeof(quant_block_q4_K), QUANT_Q8_K, q4_K_to_f32,
                                       q4_K_from_f32, q4_K_dot);
    tab[QUANT_Q5_K] = quant_traits_ref("Q5_K", QUANT_QK_K, sizeof(quant_block_q5_K), QUANT_Q8_K, q5_K_to_f32,
                                       q5_K_from_f32, q5_K_dot);
    tab[QUANT_Q6_K] = quant_traits_ref("Q6_K", QUANT_QK_K, sizeof(quant_block_q6_K), QUANT_Q8_K, q6_K_to_f32,
                                       q6_K_from_f32, q6_K_dot);
    tab[QUANT_Q8_K] = quant_traits_ref("Q8_K", QUANT_QK_K, sizeof(quant_block_q8_K), QUANT_Q8_K, q8_K_to_f32,
                                       q8_K_from_f32, q8_K_dot);
    tab[QUANT_IQ4_NL] = quant_traits_ref("IQ4_NL", QUANT_QK4_NL, sizeof(quant_block_iq4_nl), QUANT_Q8_0, iq4_nl_to_f32,
                                         iq4_nl_from_f32, iq4_nl_dot);
    tab[QUANT_IQ4_XS] = quant_traits_ref("IQ4_XS", QUANT_QK_K, sizeof(quant_block_iq4_xs), QUANT_Q8_K, iq4_xs_to_f32,
                                         iq4_xs_from_f32, iq4_xs_dot);
}
