/*
 * ssm_avx2.c — AVX2 + FMA twins of the Gated DeltaNet kernels (ssm.h).
 * The scalar versions in ssm.c stay the reference; these follow the same
 * steps in the same order per element, with fused multiply-adds and sums
 * over 8 lanes, so they agree with it to float rounding (test_kernels
 * bounds the difference):
 *   conv_silu  8 channels per vector; silu through exp8 (ops_avx2.c's e^x)
 *   gdn_step   per state row: decay and the dot with k in one pass, the
 *              update and the dot with q in a second
 *   gdn_chunk  S0 k and S0 q four tokens per pass over a row, the k.k
 *              and k.q products four tokens per pass, the substitution
 *              and outputs as axpys over the value elements, the state
 *              update one pass per row, 64 elements at a time
 *   ssd_scan   per state row: the update and the dot with C in one pass,
 *              8 state elements per vector
 */
#include "kernels/ssm.h"

#include "kernels/level.h"
#include "quant/x86.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

static inline __m256 silu8(__m256 x) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), x));
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
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
        for (; c + 8 <= C; c += 8) {
            __m256 acc = _mm256_setzero_ps();
            for (int k = 0; k < K; k++)
                acc = _mm256_fmadd_ps(_mm256_loadu_ps(in[k] + c), _mm256_loadu_ps(a->w + (size_t)k * a->ldc + c), acc);
            if (a->bias) acc = _mm256_add_ps(acc, _mm256_loadu_ps(a->bias + c));
            _mm256_storeu_ps(y + c, silu8(acc));
        }
        for (; c < C; c++) {
            float acc = 0.0f;
            for (int k = 0; k < K; k++) acc = fmaf(in[k][c], a->w[(size_t)k * a->ldc + c], acc);
            if (a->bias) acc += a->bias[c];
            y[c] = acc / (1.0f + expf(-acc));
        }
    }
    const int keep = K - 1;
    for (int r = 0; r < keep; r++) {
        const int src = a->n - keep + r;
        float *dst = a->state + (size_t)r * a->ldc;
        if (src >= 0)
            memcpy(dst, a->x + (size_t)src * a->ldx, (size_t)C * sizeof(float));
        else
            memmove(dst, a->state + (size_t)(r + a->n) * a->ldc, (size_t)C * sizeof(float));
    }
}

/* dot of n floats, 8 lanes then the tail */
static inline float dot8(const float *a, const float *b, int n) {
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    float s = hsum8(acc);
    for (; i < n; i++) s = fmaf(a[i], b[i], s);
    return s;
}

static void gdn_step(const kern_gdn *a) {
    const int dk = a->dk, dv = a->dv, d8 = dk & ~7;
    for (int t = 0; t < a->n; t++) {
        const float *q = a->q + (size_t)t * a->ld_qk, *k = a->k + (size_t)t * a->ld_qk;
        const float *v = a->v + (size_t)t * a->ld_v;
        const float decay = expf(a->g[(size_t)t * a->ld_gb]), beta = a->beta[(size_t)t * a->ld_gb];
        const __m256 dc = _mm256_set1_ps(decay);
        float *o = a->o + (size_t)t * a->ld_o;
        for (int j = 0; j < dv; j++) {
            float *row = a->s + (size_t)j * dk;
            __m256 acc = _mm256_setzero_ps();
            for (int i = 0; i < d8; i += 8) {
                const __m256 r = _mm256_mul_ps(_mm256_loadu_ps(row + i), dc);
                _mm256_storeu_ps(row + i, r);
                acc = _mm256_fmadd_ps(r, _mm256_loadu_ps(k + i), acc);
            }
            float sk = hsum8(acc);
            for (int i = d8; i < dk; i++) {
                row[i] *= decay;
                sk = fmaf(row[i], k[i], sk);
            }
            const float d = (v[j] - sk) * beta;
            const __m256 dd = _mm256_set1_ps(d);
            acc = _mm256_setzero_ps();
            for (int i = 0; i < d8; i += 8) {
                const __m256 r = _mm256_fmadd_ps(dd, _mm256_loadu_ps(k + i), _mm256_loadu_ps(row + i));
                _mm256_storeu_ps(row + i, r);
                acc = _mm256_fmadd_ps(r, _mm256_loadu_ps(q + i), acc);
            }
            float sq = hsum8(acc);
            for (int i = d8; i < dk; i++) {
                row[i] = fmaf(d, k[i], row[i]);
                sq = fmaf(row[i], q[i], sq);
            }
            o[j] = sq * a->scale;
        }
    }
}

/* y[0..n) += f * x (8 lanes, then the tail) */
static inline void axpy8(float *y, float f, const float *x, int n) {
    const __m256 ff = _mm256_set1_ps(f);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(ff, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] = fmaf(f, x[i], y[i]);
}

static void gdn_piece(const kern_gdn *a, int t0, int c) {
    const int dk = a->dk, dv = a->dv, C = KERN_GDN_CHUNK, d8 = dk & ~7;
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
    /* S0 k_t and S0 q_t: four tokens per pass over a row */
    for (int j = 0; j < dv; j++) {
        const float *row = a->s + (size_t)j * dk;
        int t = 0;
        for (; t + 4 <= c; t += 4) {
            __m256 k0 = _mm256_setzero_ps(), k1 = k0, k2 = k0, k3 = k0, q0 = k0, q1 = k0, q2 = k0, q3 = k0;
            for (int i = 0; i < d8; i += 8) {
                const __m256 r = _mm256_loadu_ps(row + i);
                k0 = _mm256_fmadd_ps(r, _mm256_loadu_ps(K[t] + i), k0);
                k1 = _mm256_fmadd_ps(r, _mm256_loadu_ps(K[t + 1] + i), k1);
                k2 = _mm256_fmadd_ps(r, _mm256_loadu_ps(K[t + 2] + i), k2);
                k3 = _mm256_fmadd_ps(r, _mm256_loadu_ps(K[t + 3] + i), k3);
                q0 = _mm256_fmadd_ps(r, _mm256_loadu_ps(Q[t] + i), q0);
                q1 = _mm256_fmadd_ps(r, _mm256_loadu_ps(Q[t + 1] + i), q1);
                q2 = _mm256_fmadd_ps(r, _mm256_loadu_ps(Q[t + 2] + i), q2);
                q3 = _mm256_fmadd_ps(r, _mm256_loadu_ps(Q[t + 3] + i), q3);
            }
            float ks[4] = {hsum8(k0), hsum8(k1), hsum8(k2), hsum8(k3)};
            float qs[4] = {hsum8(q0), hsum8(q1), hsum8(q2), hsum8(q3)};
            for (int i = d8; i < dk; i++)
                for (int u4 = 0; u4 < 4; u4++) {
                    ks[u4] = fmaf(row[i], K[t + u4][i], ks[u4]);
                    qs[u4] = fmaf(row[i], Q[t + u4][i], qs[u4]);
                }
            for (int u4 = 0; u4 < 4; u4++) {
                sk[(size_t)(t + u4) * dv + j] = ks[u4];
                sq[(size_t)(t + u4) * dv + j] = qs[u4];
            }
        }
        for (; t < c; t++) {
            sk[(size_t)t * dv + j] = dot8(row, K[t], dk);
            sq[(size_t)t * dv + j] = dot8(row, Q[t], dk);
        }
    }
    /* k_t . k_s and k_s . q_t for s <= t: four s per pass over k_t and
     * q_t, eight independent sums (each as dot8 adds it, so the same
     * floats) */
    for (int t = 0; t < c; t++) {
        int s = 0;
        for (; s + 4 <= t + 1; s += 4) {
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
            for (int i = 0; i < d8; i += 8) {
                const __m256 kt = _mm256_loadu_ps(K[t] + i), qt = _mm256_loadu_ps(Q[t] + i);
                const __m256 s0 = _mm256_loadu_ps(K[s] + i), s1 = _mm256_loadu_ps(K[s + 1] + i);
                const __m256 s2 = _mm256_loadu_ps(K[s + 2] + i), s3 = _mm256_loadu_ps(K[s + 3] + i);
                a0 = _mm256_fmadd_ps(kt, s0, a0);
                a1 = _mm256_fmadd_ps(kt, s1, a1);
                a2 = _mm256_fmadd_ps(kt, s2, a2);
                a3 = _mm256_fmadd_ps(kt, s3, a3);
                b0 = _mm256_fmadd_ps(s0, qt, b0);
                b1 = _mm256_fmadd_ps(s1, qt, b1);
                b2 = _mm256_fmadd_ps(s2, qt, b2);
                b3 = _mm256_fmadd_ps(s3, qt, b3);
            }
            float ks[4] = {hsum8(a0), hsum8(a1), hsum8(a2), hsum8(a3)};
            float qs[4] = {hsum8(b0), hsum8(b1), hsum8(b2), hsum8(b3)};
            for (int i = d8; i < dk; i++)
                for (int u4 = 0; u4 < 4; u4++) {
                    ks[u4] = fmaf(K[t][i], K[s + u4][i], ks[u4]);
                    qs[u4] = fmaf(K[s + u4][i], Q[t][i], qs[u4]);
                }
            for (int u4 = 0; u4 < 4; u4++) {
                kk[t * C + s + u4] = ks[u4];
                kq[t * C + s + u4] = qs[u4];
            }
        }
        for (; s <= t; s++) {
            kk[t * C + s] = dot8(K[t], K[s], dk);
            kq[t * C + s] = dot8(K[s], Q[t], dk);
        }
    }
    for (int t = 0; t < c; t++) {
        float *ut = u + (size_t)t * dv;
        const __m256 bt = _mm256_set1_ps(beta[t]), et = _mm256_set1_ps(eG[t]);
        int j = 0;
        for (; j + 8 <= dv; j += 8) {
            const __m256 w = _mm256_fnmadd_ps(et, _mm256_loadu_ps(sk + (size_t)t * dv + j), _mm256_loadu_ps(V[t] + j));
            _mm256_storeu_ps(ut + j, _mm256_mul_ps(bt, w));
        }
        for (; j < dv; j++) ut[j] = beta[t] * fmaf(-eG[t], sk[(size_t)t * dv + j], V[t][j]);
        for (int s = 0; s < t; s++) axpy8(ut, -(beta[t] * expf(G[t] - G[s]) * kk[t * C + s]), u + (size_t)s * dv, dv);
        float *o = a->o + (size_t)(t0 + t) * a->ld_o;
        for (j = 0; j < dv; j++) o[j] = eG[t] * sq[(size_t)t * dv + j];
        for (int s = 0; s <= t; s++) axpy8(o, expf(G[t] - G[s]) * kq[t * C + s], u + (size_t)s * dv, dv);
        for (j = 0; j < dv; j++) o[j] *= a->scale;
    }
    const float last = G[c - 1];
    float f[KERN_GDN_CHUNK];
    for (int s = 0; s < c; s++) f[s] = expf(last - G[s]);
    const __m256 el = _mm256_set1_ps(eG[c - 1]);
    for (int j = 0; j < dv; j++) {
        float *row = a->s + (size_t)j * dk;
        float us[KERN_GDN_CHUNK];
        for (int s = 0; s < c; s++) us[s] = u[(size_t)s * dv + j] * f[s];
        /* each element's sum over s is a chain of c fmas: eight of them
         * (64 elements) side by side keep the FMA pipes fed */
        int i = 0;
        for (; i + 64 <= d8; i += 64) {
            __m256 r[8];
#pragma GCC unroll 8
            for (int b = 0; b < 8; b++) r[b] = _mm256_mul_ps(_mm256_loadu_ps(row + i + 8 * b), el);
            for (int s = 0; s < c; s++) {
                const __m256 f8 = _mm256_set1_ps(us[s]);
#pragma GCC unroll 8
                for (int b = 0; b < 8; b++) r[b] = _mm256_fmadd_ps(f8, _mm256_loadu_ps(K[s] + i + 8 * b), r[b]);
            }
#pragma GCC unroll 8
            for (int b = 0; b < 8; b++) _mm256_storeu_ps(row + i + 8 * b, r[b]);
        }
        for (; i < d8; i += 8) {
            __m256 r = _mm256_mul_ps(_mm256_loadu_ps(row + i), el);
            for (int s = 0; s < c; s++) r = _mm256_fmadd_ps(_mm256_set1_ps(us[s]), _mm256_loadu_ps(K[s] + i), r);
            _mm256_storeu_ps(row + i, r);
        }
        for (i = d8; i < dk; i++) {
            float r = row[i] * eG[c - 1];
            for (int s = 0; s < c; s++) r = fmaf(us[s], K[s][i], r);
            row[i] = r;
        }
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
        const __m256 vdA = _mm256_set1_ps(dA);
        float *y = a->y + (size_t)t * a->ld_y;
        for (int p = 0; p < P; p++) {
            float *row = a->s + (size_t)p * N;
            const float xdt = x[p] * dt;
            const __m256 vxdt = _mm256_set1_ps(xdt);
            __m256 acc = _mm256_setzero_ps();
            int i = 0;
            for (; i + 8 <= N; i += 8) {
                const __m256 st =
                    _mm256_fmadd_ps(_mm256_loadu_ps(row + i), vdA, _mm256_mul_ps(_mm256_loadu_ps(B + i), vxdt));
                acc = _mm256_fmadd_ps(st, _mm256_loadu_ps(C + i), acc);
                _mm256_storeu_ps(row + i, st);
            }
            float sum = hsum8(acc);
            for (; i < N; i++) {
                const float st = fmaf(row[i], dA, B[i] * xdt);
                sum = fmaf(st, C[i], sum);
                row[i] = st;
            }
            y[p] = fmaf(x[p], a->D, sum);
        }
    }
}

const kern_ssm_ops kern_ssm_avx2 = {
    .conv_silu = conv_silu,
    .gdn_step = gdn_step,
    .gdn_chunk = gdn_chunk,
    .ssd_scan = ssd_scan,
};
