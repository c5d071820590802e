/* Gated DeltaNet kernels: the scalar references (ssm.h) and small helpers. */
#include "kernels/ssm.h"

#include "kernels/level.h"
#include "quant/quant.h"

#include <math.h>
#include <string.h>

float kern_softplus(float x) { return x > 20.0f ? x : logf(1.0f + expf(x)); }

float kern_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

void kern_l2norm(float *x, int n, float eps) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    const float scale = 1.0f / fmaxf(sqrtf((float)ss), eps);
    for (int i = 0; i < n; i++) x[i] *= scale;
}

void kern_rmsnorm_gated(float *out, const float *x, const float *w, const float *z, int n, float eps) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    const float scale = 1.0f / sqrtf((float)(ss / n) + eps);
    for (int i = 0; i < n; i++) out[i] = x[i] * scale * w[i] * (z[i] / (1.0f + expf(-z[i])));
}

void kern_moe_route(const float *logits, int n_expert, int k, int norm, float scale, int32_t *ids, float *w) {
    float mx = -INFINITY;
    for (int e = 0; e < n_expert; e++) mx = logits[e] > mx ? logits[e] : mx;
    double sum = 0.0;
    for (int e = 0; e < n_expert; e++) sum += expf(logits[e] - mx);
    const float inv = (float)(1.0 / sum);
    /* selection by the logits (the softmax keeps their order), k passes */
    for (int i = 0; i < k; i++) {
        int best = -1;
        for (int e = 0; e < n_expert; e++) {
            int taken = 0;
            for (int j = 0; j < i && !taken; j++) taken = ids[j] == e;
            if (!taken && (best < 0 || logits[e] > logits[best])) best = e;
        }
        ids[i] = best;
        w[i] = expf(logits[best] - mx) * inv;
    }
    if (norm) {
        float s = 0.0f;
        for (int i = 0; i < k; i++) s += w[i];
        if (s < 6.103515625e-5f) s = 6.103515625e-5f;
        for (int i = 0; i < k; i++) w[i] /= s;
    }
    if (scale != 1.0f && scale != 0.0f)
        for (int i = 0; i < k; i++) w[i] *= scale;
}

void kern_moe_route_sel(float *p, const kern_moe_gate *g, int n_expert, int k, float *sel, int32_t *ids, float *w) {
    if (g->sigmoid) {
        for (int e = 0; e < n_expert; e++) p[e] = kern_sigmoid(p[e]);
    } else {
        float mx = -INFINITY;
        for (int e = 0; e < n_expert; e++) mx = p[e] > mx ? p[e] : mx;
        double sum = 0.0;
        for (int e = 0; e < n_expert; e++) sum += expf(p[e] - mx);
        const float inv = (float)(1.0 / sum);
        for (int e = 0; e < n_expert; e++) p[e] = expf(p[e] - mx) * inv;
    }
    for (int e = 0; e < n_expert; e++) sel[e] = g->bias ? p[e] + g->bias[e] : p[e];
    if (g->n_group > 1 && g->n_group_used < g->n_group) {
        /* a group's score: its two largest selection values; the groups
         * below the best n_group_used are masked out */
        const int per = n_expert / g->n_group;
        float score[256];
        uint8_t keep[256] = {0};
        for (int q = 0; q < g->n_group; q++) {
            float a = -INFINITY, b = -INFINITY;
            for (int e = q * per; e < (q + 1) * per; e++) {
                if (sel[e] > a) {
                    b = a;
                    a = sel[e];
                } else if (sel[e] > b) {
                    b = sel[e];
                }
            }
            score[q] = per > 1 ? a + b : a;
        }
        for (int i = 0; i < g->n_group_used; i++) {
            int best = -1;
            for (int q = 0; q < g->n_group; q++)
                if (!keep[q] && (best < 0 || score[q] > score[best])) best = q;
            keep[best] = 1;
        }
        for (int e = 0; e < n_expert; e++)
            if (!keep[e / per]) sel[e] = -INFINITY;
    }
    for (int i = 0; i < k; i++) { /* k passes, ties to the lower id */
        int best = -1;
        for (int e = 0; e < n_expert; e++) {
            int taken = 0;
            for (int j = 0; j < i && !taken; j++) taken = ids[j] == e;
            if (!taken && (best < 0 || sel[e] > sel[best])) best = e;
        }
        ids[i] = best;
        w[i] = p[best];
    }
    if (g->norm) {
        float s = 0.0f;
        for (int i = 0; i < k; i++) s += w[i];
        if (s < 6.103515625e-5f) s = 6.103515625e-5f;
        for (int i = 0; i < k; i++) w[i] /= s;
    }
    if (g->scale != 1.0f && g->scale != 0.0f)
        for (int i = 0; i < k; i++) w[i] *= g->scale;
}

/* ------------------------------------------------------------ references */

static float silu(float v) { return v / (1.0f + expf(-v)); }

static void conv_silu_ref(const kern_conv *a) {
    const int C = a->C, K = a->K;
    for (int t = 0; t < a->n; t++) {
        float *yt = a->y + (size_t)t * a->ldy;
        for (int c = 0; c < C; c++) {
            float acc = 0.0f;
            /* taps 0..K-2 on the window (state then earlier tokens), K-1 on x_t */
            for (int k = 0; k < K; k++) {
                const int src = t + k - (K - 1); /* token index, < 0: state row K-1+src */
                const float in =
                    src < 0 ? a->state[(size_t)(K - 1 + src) * a->ldc + c] : a->x[(size_t)src * a->ldx + c];
                acc += in * a->w[(size_t)k * a->ldc + c];
            }
            if (a->bias) acc += a->bias[c];
            yt[c] = silu(acc);
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

static float dot(const float *a, const float *b, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static void gdn_step_ref(const kern_gdn *a) {
    const int dk = a->dk, dv = a->dv;
    for (int t = 0; t < a->n; t++) {
        const float *q = a->q + (size_t)t * a->ld_qk, *k = a->k + (size_t)t * a->ld_qk;
        const float *v = a->v + (size_t)t * a->ld_v;
        const float decay = expf(a->g[(size_t)t * a->ld_gb]), beta = a->beta[(size_t)t * a->ld_gb];
        float *o = a->o + (size_t)t * a->ld_o;
        for (int j = 0; j < dv; j++) {
            float *row = a->s + (size_t)j * dk;
            for (int i = 0; i < dk; i++) row[i] *= decay;
            const float d = (v[j] - dot(row, k, dk)) * beta;
            for (int i = 0; i < dk; i++) row[i] += d * k[i];
            o[j] = dot(row, q, dk) * a->scale;
        }
    }
}

/* One chunk of c <= KERN_GDN_CHUNK tokens (see ssm.h for the algebra). */
static void gdn_piece_ref(const kern_gdn *a, int t0, int c) {
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
    /* S0 k_t and S0 q_t, row by row */
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
    /* u_t by forward substitution, then the outputs */
    for (int t = 0; t < c; t++) {
        float *ut = u + (size_t)t * dv;
        for (int j = 0; j < dv; j++) ut[j] = beta[t] * (V[t][j] - eG[t] * sk[(size_t)t * dv + j]);
        for (int s = 0; s < t; s++) {
            const float f = beta[t] * expf(G[t] - G[s]) * kk[t * C + s];
            const float *us = u + (size_t)s * dv;
            for (int j = 0; j < dv; j++) ut[j] -= f * us[j];
        }
        float *o = a->o + (size_t)(t0 + t) * a->ld_o;
        for (int j = 0; j < dv; j++) o[j] = eG[t] * sq[(size_t)t * dv + j];
        for (int s = 0; s <= t; s++) {
            const float f = expf(G[t] - G[s]) * kq[t * C + s];
            const float *us = u + (size_t)s * dv;
            for (int j = 0; j < dv; j++) o[j] += f * us[j];
        }
        for (int j = 0; j < dv; j++) o[j] *= a->scale;
    }
    /* the state at the end of the piece */
    const float last = G[c - 1];
    for (int s = 0; s < c; s++) {
        const float f = expf(last - G[s]);
        for (int j = 0; j < dv; j++) u[(size_t)s * dv + j] *= f;
    }
    for (int j = 0; j < dv; j++) {
        float *row = a->s + (size_t)j * dk;
        for (int i = 0; i < dk; i++) row[i] *= eG[c - 1];
        for (int s = 0; s < c; s++) {
            const float us = u[(size_t)s * dv + j];
            for (int i = 0; i < dk; i++) row[i] += us * K[s][i];
        }
    }
}

static void gdn_chunk_ref(const kern_gdn *a) {
    for (int t = 0; t < a->n;) {
        const int pos = a->pos0 + t, end = (pos / KERN_GDN_CHUNK + 1) * KERN_GDN_CHUNK - a->pos0;
        const int c = (end < a->n ? end : a->n) - t;
        gdn_piece_ref(a, t, c);
        t += c;
    }
}

static void ssd_scan_ref(const kern_ssd *a) {
    const int P = a->P, N = a->N;
    for (int t = 0; t < a->n; t++) {
        const float *x = a->x + (size_t)t * a->ld_x, *B = a->B + (size_t)t * a->ld_bc, *C = a->C + (size_t)t * a->ld_bc;
        const float dt = a->dt[(size_t)t * a->ld_dt], dA = expf(dt * a->A);
        float *y = a->y + (size_t)t * a->ld_y;
        for (int p = 0; p < P; p++) {
            float *row = a->s + (size_t)p * N;
            const float xdt = x[p] * dt;
            float sum = 0.0f;
            for (int i = 0; i < N; i++) {
                const float st = row[i] * dA + B[i] * xdt;
                sum += st * C[i];
                row[i] = st;
            }
            y[p] = sum + x[p] * a->D;
        }
    }
}

const kern_ssm_ops kern_ssm_scalar = {
    .conv_silu = conv_silu_ref,
    .gdn_step = gdn_step_ref,
    .gdn_chunk = gdn_chunk_ref,
    .ssd_scan = ssd_scan_ref,
};

const kern_ssm_ops *kern_ssm_ops_at(int isa) {
    const kern_level *l = kern_level_at(isa);
    return l ? l->ssm : NULL;
}

const kern_ssm_ops *kern_ssm_ops_best(void) { return kern_level_best()->ssm; }
