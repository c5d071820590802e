/*
 * ssm_neon.c — NEON twins of the recurrent kernels of ssm.h (the short
 * convolution, Gated DeltaNet's two forms, the Mamba-2 scan).  The scalar
 * versions in ssm.c stay the reference; these follow the same steps in the
 * same order per element, with fused multiply-adds and sums over 4 lanes,
 * so they agree with it to float rounding (test_kernels bounds the
 * difference, as for the AVX2 twins):
 *   conv_silu  4 channels per vector; silu through kern_exp_attn's e^x
 *   gdn_step   per state row: decay and the dot with k in one pass, the
 *              update and the dot with q in a second
 *   gdn_chunk  the reference's steps with its dots and axpys over vectors
 *   ssd_scan   per state row: the update and the dot with C in one pass
 */
#include "kernels/ssm.h"

#include "kernels/level.h"
#include "kernels/neon.h"

#include <math.h>
#include <string.h>

static inline float32x4_t silu4(float32x4_t x) {
    return vdivq_f32(x, vaddq_f32(vdupq_n_f32(1.0f), kn_exp4(vnegq_f32(x))));
}

static void conv_silu(const kern_conv *a) {
    const int C = a->C, K = a->K;
    for (int t = 0; t < a->n; t++) {
        const float *in[KERN_CONV_MAX_K]; /* the K rows this token's window reads */
        for (int k = 0; k < K; k++) {
            const int src = t + k - (K - 1);
            in[k] = src < 0 ? a->state + (size_t)(K - 1 + src) * a->ldc : a->x + (size_t)src * a->ldx;
        }
        float *y = a->y + (size_t)t * a->ldy;
        int c = 0;
        for (; c + 4 <= C; c += 4) {
            float32x4_t acc = vdupq_n_f32(0.0f);
            for (int k = 0; k < K; k++)
                acc = vfmaq_f32(acc, vld1q_f32(in[k] + c), vld1q_f32(a->w + (size_t)k * a->ldc + c));
            if (a->bias) acc = vaddq_f32(acc, vld1q_f32(a->bias + c));
            vst1q_f32(y + c, silu4(acc));
        }
        for (; c < C; c++) {
            float acc = 0.0f;
            for (int k = 0; k < K; k++) acc = fmaf(in[k][c], a->w[(size_t)k * a->ldc + c], acc);
            if (a->bias) acc += a->bias[c];
            y[c] = acc / (1.0f + expf(-acc));
        }
    }
    /* the state becomes the last K - 1 inputs */
    const int keep = K - 1;
    for (int r = 0; r < keep; r++) {
        const int src = a->n - keep + r; /* token index of state row r */
        float *dst = a->state + (size_t)r * a->ldc;
        if (src >= 0)
            memcpy(dst, a->x + (size_t)src * a->ldx, (size_t)C * sizeof(float));
        else
            memmove(dst, a->state + (size_t)(r + a->n) * a->ldc, (size_t)C * sizeof(float));
    }
}

/* a . b over 4 lanes (two chains), the tail in float */
static float dot(const float *a, const float *b, int n) {
    float32x4_t s0 = vdupq_n_f32(0.0f), s1 = s0;
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        s0 = vfmaq_f32(s0, vld1q_f32(a + i), vld1q_f32(b + i));
        s1 = vfmaq_f32(s1, vld1q_f32(a + i + 4), vld1q_f32(b + i + 4));
    }
    for (; i + 4 <= n; i += 4) s0 = vfmaq_f32(s0, vld1q_f32(a + i), vld1q_f32(b + i));
    float s = vaddvq_f32(vaddq_f32(s0, s1));
    for (; i < n; i++) s = fmaf(a[i], b[i], s);
    return s;
}

/* y += f * x */
static void axpy(float *y, float f, const float *x, int n) {
    const float32x4_t vf = vdupq_n_f32(f);
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vfmaq_f32(vld1q_f32(y + i), vld1q_f32(x + i), vf));
    for (; i < n; i++) y[i] = fmaf(f, x[i], y[i]);
}

/* x *= f */
static void scal(float *x, float f, int n) {
    const float32x4_t vf = vdupq_n_f32(f);
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(x + i, vmulq_f32(vld1q_f32(x + i), vf));
    for (; i < n; i++) x[i] *= f;
}

static void gdn_step(const kern_gdn *a) {
    const int dk = a->dk, dv = a->dv;
    for (int t = 0; t < a->n; t++) {
        const float *q = a->q + (size_t)t * a->ld_qk, *k = a->k + (size_t)t * a->ld_qk;
        const float *v = a->v + (size_t)t * a->ld_v;
        const float decay = expf(a->g[(size_t)t * a->ld_gb]), beta = a->beta[(size_t)t * a->ld_gb];
        const float32x4_t vdec = vdupq_n_f32(decay);
        float *o = a->o + (size_t)t * a->ld_o;
        for (int j = 0; j < dv; j++) {
            float *row = a->s + (size_t)j * dk;
            /* decay and the dot with k in one pass */
            float32x4_t sk = vdupq_n_f32(0.0f);
            int i = 0;
            for (; i + 4 <= dk; i += 4) {
                const float32x4_t r = vmulq_f32(vld1q_f32(row + i), vdec);
                vst1q_f32(row + i, r);
                sk = vfmaq_f32(sk, r, vld1q_f32(k + i));
            }
            float kd = vaddvq_f32(sk);
            for (; i < dk; i++) {
                row[i] *= decay;
                kd = fmaf(row[i], k[i], kd);
            }
            const float d = (v[j] - kd) * beta;
            /* the update and the dot with q */
            const float32x4_t vd = vdupq_n_f32(d);
            float32x4_t sq = vdupq_n_f32(0.0f);
            for (i = 0; i + 4 <= dk; i += 4) {
                const float32x4_t r = vfmaq_f32(vld1q_f32(row + i), vd, vld1q_f32(k + i));
                vst1q_f32(row + i, r);
                sq = vfmaq_f32(sq, r, vld1q_f32(q + i));
            }
            float qd = vaddvq_f32(sq);
            for (; i < dk; i++) {
                row[i] = fmaf(d, k[i], row[i]);
                qd = fmaf(row[i], q[i], qd);
            }
            o[j] = qd * a->scale;
        }
    }
}

/* One chunk of c <= KERN_GDN_CHUNK tokens (ssm.h; the steps of ssm.c's). */
static void gdn_piece(const kern_gdn *a, int t0, int c) {
    const int dk = a->dk, dv = a->dv, C = KERN_GDN_CHUNK;
    float *sk = a->scratch, *sq = sk + (size_t)C * dv, *u = sq + (size_t)C * dv;
    float *kk = u + (size_t)C * dv, *kq = kk + (size_t)C * C, *G = kq + (size_t)C * C, *eG = G + C;
    const float *K[KERN_GDN_CHUNK], *Q[KERN_GDN_CHUNK], *V[KERN_GDN_CHUNK];
    float beta[KERN_GDN_CHUNK];
    float acc = 0.0f;
    for (int t = 0; t < c; t++) {
        K[t] = a->k + (size_t)(t0 + t) * a->ld_qk;
        Q[t] = a->q + (size_t)(t0 + t) * a->ld_qk;
        V[t] = a->v + (size_t)(t0 + t) * a->ld_v;
        beta[t] = a->beta[(size_t)(t0 + t) * a->ld_gb];
        acc += a->g[(size_t)(t0 + t) * a->ld_gb];
        G[t] = acc;
        eG[t] = expf(acc);
    }
    for (int j = 0; j < dv; j++) {
        const float *row = a->s + (size_t)j * dk;
        for (int t = 0; t < c; t++) {
            sk[(size_t)t * dv + j] = dot(row, K[t], dk);
            sq[(size_t)t * dv + j] = dot(row, Q[t], dk);
        }
    }
    for (int t = 0; t < c; t++)
        for (int s = 0; s <= t; s++) {
            kk[t * C + s] = dot(K[t], K[s], dk);
            kq[t * C + s] = dot(K[s], Q[t], dk);
        }
    for (int t = 0; t < c; t++) {
        float *ut = u + (size_t)t * dv;
        for (int j = 0; j < dv; j++) ut[j] = beta[t] * (V[t][j] - eG[t] * sk[(size_t)t * dv + j]);
        for (int s = 0; s < t; s++) axpy(ut, -(beta[t] * expf(G[t] - G[s]) * kk[t * C + s]), u + (size_t)s * dv, dv);
        float *o = a->o + (size_t)(t0 + t) * a->ld_o;
        for (int j = 0; j < dv; j++) o[j] = eG[t] * sq[(size_t)t * dv + j];
        for (int s = 0; s <= t; s++) axpy(o, expf(G[t] - G[s]) * kq[t * C + s], u + (size_t)s * dv, dv);
        scal(o, a->scale, dv);
    }
    const float last = G[c - 1];
    for (int s = 0; s < c; s++) scal(u + (size_t)s * dv, expf(last - G[s]), dv);
    for (int j = 0; j < dv; j++) {
        float *row = a->s + (size_t)j * dk;
        scal(row, eG[c - 1], dk);
        for (int s = 0; s < c; s++) axpy(row, u[(size_t)s * dv + j], K[s], dk);
    }
}

static void gdn_chunk(const kern_gdn *a) {
    for (int t = 0; t < a->n;) {
        const int pos = a->pos0 + t, end = (pos / KERN_GDN_CHUNK + 1) * KERN_GDN_CHUNK - a->pos0;
        const int c = (end < a->n ? end : a->n) - t;
        gdn_piece(a, t, c);
        t += c;
    }
}

static void ssd_scan(const kern_ssd *a) {
    const int P = a->P, N = a->N;
    for (int t = 0; t < a->n; t++) {
        const float *x = a->x + (size_t)t * a->ld_x, *B = a->B + (size_t)t * a->ld_bc, *C = a->C + (size_t)t * a->ld_bc;
        const float dt = a->dt[(size_t)t * a->ld_dt], dA = expf(dt * a->A);
        const float32x4_t vda = vdupq_n_f32(dA);
        float *y = a->y + (size_t)t * a->ld_y;
        for (int p = 0; p < P; p++) {
            float *row = a->s + (size_t)p * N;
            const float xdt = x[p] * dt;
            const float32x4_t vx = vdupq_n_f32(xdt);
            float32x4_t s4 = vdupq_n_f32(0.0f);
            int i = 0;
            for (; i + 4 <= N; i += 4) {
                const float32x4_t st = vfmaq_f32(vmulq_f32(vld1q_f32(row + i), vda), vld1q_f32(B + i), vx);
                s4 = vfmaq_f32(s4, st, vld1q_f32(C + i));
                vst1q_f32(row + i, st);
            }
            float sum = vaddvq_f32(s4);
            for (; i < N; i++) {
                const float st = fmaf(B[i], xdt, row[i] * dA);
                sum = fmaf(st, C[i], sum);
                row[i] = st;
            }
            y[p] = sum + x[p] * a->D;
        }
    }
}

const kern_ssm_ops kern_ssm_neon = {
    .conv_silu = conv_silu,
    .gdn_step = gdn_step,
    .gdn_chunk = gdn_chunk,
    .ssd_scan = ssd_scan,
};
