#include "kernels/ops.h"

#include "kernels/level.h"
#include "quant/quant.h"

#include <math.h>
#include <string.h>

void kern_rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float scale = (float)(1.0 / sqrt(ss / n + eps));
    if (w) {
        for (int i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
    } else {
        for (int i = 0; i < n; i++) out[i] = x[i] * scale;
    }
}

void kern_layernorm(float *out, const float *x, const float *w, const float *b, int n, float eps) {
    double mean = 0.0, var = 0.0;
    for (int i = 0; i < n; i++) mean += x[i];
    mean /= n;
    for (int i = 0; i < n; i++) {
        double d = x[i] - mean;
        var += d * d;
    }
    var /= n;
    float inv = (float)(1.0 / sqrt(var + eps));
    for (int i = 0; i < n; i++) {
        float v = (float)(x[i] - mean) * inv;
        if (w) v *= w[i];
        if (b) v += b[i];
        out[i] = v;
    }
}

void kern_softmax(float *x, int n) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) x[i] *= inv;
}

void kern_swiglu(float *g, const float *u, int n) {
    for (int i = 0; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

void kern_swiglu_oai(float *g, const float *u, int n, float alpha, float limit) {
    for (int i = 0; i < n; i++) {
        const float x = g[i] < limit ? g[i] : limit;
        const float y = u[i] < -limit ? -limit : u[i] > limit ? limit : u[i];
        g[i] = x / (1.0f + expf(alpha * -x)) * (y + 1.0f);
    }
}

void kern_gelu(float *x, int n) {
    const float c = 0.7978845608028654f; /* sqrt(2/pi) */
    for (int i = 0; i < n; i++) {
        float v = x[i];
        x[i] = 0.5f * v * (1.0f + tanhf(c * (v + 0.044715f * v * v * v)));
    }
}

void kern_gelu_erf(float *x, int n) {
    for (int i = 0; i < n; i++) x[i] = (float)(0.5 * x[i] * (1.0 + erf(x[i] * 0.70710678118654752440)));
}

void kern_add(float *y, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] += x[i];
}

void kern_add_rows(float *y, const float *b, int n_rows, int n) {
    for (int r = 0; r < n_rows; r++) kern_add(y + (long)r * n, b, n);
}

void kern_scale_f32(float *x, float s, int n) {
    for (int i = 0; i < n; i++) x[i] *= s;
}

float kern_attn_temp(int pos, float scale, float offset, float floor_scale) {
    return (float)(log(floor(((double)pos + offset) / floor_scale) + 1.0) * scale + 1.0);
}

/* YaRN: the dimension index at which a rotation completes n_rot turns over
 * the original context (fractional). */
static float yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
    return n_dims * logf((float)n_ctx_orig / (n_rot * 2.0f * (float)M_PI)) / (2.0f * logf(base));
}

/* Which of the four positions angle i of an M-RoPE table takes (kern_rope). */
static int rope_section(const kern_rope *r, int i) {
    const int *s = r->sections;
    const int k = i % (s[0] + s[1] + s[2] + s[3]);
    if (r->mrope == KERN_IMROPE) {
        if (k % 3 == 1 && k < 3 * s[1]) return 1;
        if (k % 3 == 2 && k < 3 * s[2]) return 2;
        if (k % 3 == 0 && k < 3 * s[0]) return 0;
        return 3;
    }
    if (k < s[0]) return 0;
    if (k < s[0] + s[1]) return 1;
    return k < s[0] + s[1] + s[2] ? 2 : 3;
}

/* The table for positions p[4]; one position (p[0]) unless r->mrope.  Each
 * position's angle advances by theta_scale per pair in float, as ggml
 * does, so equal positions give equal angles whatever their section. */
static void rope_table(const kern_rope *r, const int32_t *p, float *cs) {
    const int half = r->n_rot / 2;
    float lo = 0, hi = 0;
    float mscale = r->attn_factor;
    if (r->ext_factor != 0.0f) {
        lo = floorf(yarn_corr_dim(r->n_rot, r->n_ctx_orig, r->beta_fast, r->base));
        hi = ceilf(yarn_corr_dim(r->n_rot, r->n_ctx_orig, r->beta_slow, r->base));
        if (lo < 0) lo = 0;
        if (hi > r->n_rot - 1) hi = (float)(r->n_rot - 1);
        mscale *= 1.0f + 0.1f * logf(1.0f / r->freq_scale);
    }
    const float theta_scale = powf(r->base, -2.0f / (float)r->n_rot);
    float th[4] = {(float)p[0], 0, 0, 0};
    if (r->mrope)
        for (int k = 1; k < 4; k++) th[k] = (float)p[k];
    for (int i = 0; i < half; i++) {
        const float theta_extrap = th[r->mrope ? rope_section(r, i) : 0];
        const float te = r->freq_factors ? theta_extrap / r->freq_factors[i] : theta_extrap;
        float theta = r->freq_scale * te;
        if (r->ext_factor != 0.0f) {
            float y = ((float)i - lo) / fmaxf(0.001f, hi - lo);
            float ramp = 1.0f - fminf(1.0f, fmaxf(0.0f, y));
            float mix = ramp * r->ext_factor;
            theta = theta * (1.0f - mix) + te * mix;
        }
        cs[2 * i] = cosf(theta) * mscale;
        cs[2 * i + 1] = sinf(theta) * mscale;
        for (int k = 0; k < 4; k++) th[k] *= theta_scale;
    }
}

void kern_rope_table(const kern_rope *r, int pos, float *cs) {
    const int32_t p[4] = {pos, pos, pos, pos};
    kern_rope one = *r;
    one.mrope = 0;
    rope_table(&one, p, cs);
}

void kern_rope_table_m(const kern_rope *r, const int32_t pos[4], float *cs) { rope_table(r, pos, cs); }

void kern_rope_apply(const kern_rope *r, const float *cs, float *x, int n_heads, int head_dim) {
    const int half = r->n_rot / 2;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (long)h * head_dim;
        for (int i = 0; i < half; i++) {
            int a = r->neox ? i : 2 * i;
            int b = r->neox ? i + half : 2 * i + 1;
            float c = cs[2 * i], s = cs[2 * i + 1];
            float x0 = v[a], x1 = v[b];
            v[a] = x0 * c - x1 * s;
            v[b] = x0 * s + x1 * c;
        }
    }
}

float kern_dot_f32(const float *a, const float *b, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

float kern_dot_f16(const uint16_t *a, const float *b, int n) {
    /* the first n & ~31 elements: 4 accumulators of 8 float lanes, element
     * i in accumulator (i / 8) % 4, lane i % 8, one fma each; then lanes
     * folded (a0 + a2) + (a1 + a3), halves added, and the 4 sums added
     * pairwise (s0 + s1) + (s2 + s3).  The rest is summed in double.  The
     * products are exact in float (F16 x F16-rounded query). */
    const int np = n & ~31;
    double s = 0.0;
    if (np) {
        float acc[4][8] = {{0}};
        for (int i = 0; i < np; i += 32)
            for (int j = 0; j < 4; j++)
                for (int l = 0; l < 8; l++)
                    acc[j][l] = fmaf(quant_f16_to_f32(a[i + 8 * j + l]), b[i + 8 * j + l], acc[j][l]);
        float x[8], h[4];
        for (int l = 0; l < 8; l++) x[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
        for (int l = 0; l < 4; l++) h[l] = x[l] + x[l + 4];
        s = (double)((h[0] + h[1]) + (h[2] + h[3]));
    }
    for (int i = np; i < n; i++) s += (double)(quant_f16_to_f32(a[i]) * b[i]);
    return (float)s;
}

void kern_scale_axpy_f32(float *y, float scale, float w, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] = y[i] * scale + w * x[i];
}

void kern_scale_axpy_f16(float *y, float scale, float w, const uint16_t *x, int n) {
    for (int i = 0; i < n; i++) y[i] = y[i] * scale + w * quant_f16_to_f32(x[i]);
}

void kern_f32_to_f16_row(const float *x, uint16_t *y, int n) {
    for (int i = 0; i < n; i++) y[i] = quant_f32_to_f16(x[i]);
}

void kern_scale_f16(uint16_t *y, float s, int n) {
    for (int i = 0; i < n; i++) y[i] = quant_f32_to_f16(quant_f16_to_f32(y[i]) * s);
}

void kern_mad_f16(uint16_t *y, const uint16_t *x, float w, int n) {
    for (int i = 0; i < n; i++) y[i] = quant_f32_to_f16(fmaf(quant_f16_to_f32(x[i]), w, quant_f16_to_f32(y[i])));
}

void kern_round_f16_row(const float *x, float *y, int n) {
    for (int i = 0; i < n; i++) y[i] = quant_f16_to_f32(quant_f32_to_f16(x[i]));
}

float kern_exp_attn(float x) {
    /* the steps of ops_avx2.c's exp8, one lane: x = k ln2 + r (ln2 in two
     * parts), a degree-6 polynomial in r, 2^k in two halves */
    x = x < -87.3f ? -87.3f : x > 88.7f ? 88.7f : x;
    const float k = nearbyintf(x * 1.44269504088896341f);
    float r = fmaf(-k, 0.693359375f, x);
    r = fmaf(-k, -2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    p = fmaf(p, r, 5.0000001201e-1f);
    p = fmaf(p, r * r, r + 1.0f);
    const int32_t ki = (int32_t)k, k1 = ki >> 1, k2 = ki - k1;
    const uint32_t b1 = (uint32_t)(k1 + 127) << 23, b2 = (uint32_t)(k2 + 127) << 23;
    float e1, e2;
    memcpy(&e1, &b1, 4);
    memcpy(&e2, &b2, 4);
    return p * e1 * e2;
}

float kern_attn_inv(float S, float M, const float *sink) {
    if (!sink) return 1.0f / S;
    const float z = *sink;
    if (z > M) {
        const float ms = expf(M - z);
        return ms / (S * ms + 1.0f);
    }
    return 1.0f / (S + expf(z - M));
}

/* w_t = e^(s_t - M) and their sum in position order. */
static float softmax_weights_ref(const float *sc, float *w, int n, float M) {
    float S = 0.0f;
    for (int t = 0; t < n; t++) {
        w[t] = kern_exp_attn(sc[t] - M);
        S += w[t];
    }
    return S;
}

/* acc_f32 = 1: scores, maximum, weights, float accumulator (ops.h). */
static void attn_f32acc_one(const kern_attn_f16 *a) {
    const int hd = a->hd, n = a->n_pos;
    float *qr = a->scratch, *acc = qr + hd, *sc = qr + 2 * hd, *w = sc + n;
    kern_round_f16_row(a->q, qr, hd);
    float M = -INFINITY;
    for (int t = 0; t < n; t++) {
        sc[t] = kern_dot_f16(a->k + kern_attn_row(a, t), qr, hd) * a->scale;
        M = sc[t] > M ? sc[t] : M;
    }
    const float S = softmax_weights_ref(sc, w, n, M);
    memset(acc, 0, (size_t)hd * sizeof *acc);
    for (int t = 0; t < n; t++) {
        const uint16_t *vr = a->v + kern_attn_row(a, t);
        for (int d = 0; d < hd; d++) acc[d] = fmaf(quant_f16_to_f32(vr[d]), w[t], acc[d]);
    }
    const float inv = kern_attn_inv(S, M, a->sink);
    for (int d = 0; d < hd; d++) a->out[d] = acc[d] * inv;
}

static void attn_f16_one(const kern_attn_f16 *a) {
    if (a->acc_f32) {
        attn_f32acc_one(a);
        return;
    }
    const int hd = a->hd;
    float *qr = a->scratch;
    uint16_t *acc = (uint16_t *)(qr + hd);
    kern_round_f16_row(a->q, qr, hd);
    memset(acc, 0, (size_t)hd * sizeof *acc);
    float M = -INFINITY, S = 0.0f;
    for (int t = 0; t < a->n_pos; t++) {
        const size_t row = kern_attn_row(a, t);
        const float sc = kern_dot_f16(a->k + row, qr, hd) * a->scale;
        float ms = 1.0f, vs = 1.0f;
        if (sc > M) {
            const float old = M;
            M = sc;
            ms = expf(old - M);
            kern_scale_f16(acc, ms, hd);
        } else {
            vs = expf(sc - M);
        }
        kern_mad_f16(acc, a->v + row, vs, hd);
        S = S * ms + vs;
    }
    const float inv = kern_attn_inv(S, M, a->sink);
    for (int d = 0; d < hd; d++) a->out[d] = quant_f16_to_f32(acc[d]) * inv;
}

/* The queries one after the other, each with its own scratch. */
static void attn_f16_ref(const kern_attn_f16 *a) {
    for (int u = 0; u < a->nt; u++)
        for (int j = 0; j < a->nq; j++) {
            const kern_attn_f16 one = kern_attn_f16_query(a, u, j);
            attn_f16_one(&one);
        }
}

/* One query against a Q8_0 cache, the loops of ops.h verbatim. */
static void attn_q8_one(const kern_attn_q8 *a) {
    const int hd = a->hd, n = a->n_pos, nb = hd / 32;
    quant_block_q8_0 *qq = (quant_block_q8_0 *)a->scratch;
    float *acc = a->scratch + hd, *sc = a->scratch + 2 * hd, *w = sc + n;
    quant_get(QUANT_Q8_0)->from_f32(a->q, qq, hd);
    float M = -INFINITY;
    for (int t = 0; t < n; t++) {
        const quant_block_q8_0 *kb = (const quant_block_q8_0 *)(a->k + kern_attn_q8_row(a, t));
        float s = 0.0f;
        for (int b = 0; b < nb; b++) {
            int32_t is = 0;
            for (int i = 0; i < 32; i++) is += (int32_t)qq[b].qs[i] * kb[b].qs[i];
            s = fmaf((float)is, quant_f16_to_f32(qq[b].d) * quant_f16_to_f32(kb[b].d), s);
        }
        sc[t] = s * a->scale;
        M = sc[t] > M ? sc[t] : M;
    }
    const float S = softmax_weights_ref(sc, w, n, M);
    memset(acc, 0, (size_t)hd * sizeof *acc);
    for (int t = 0; t < n; t++) {
        const quant_block_q8_0 *vb = (const quant_block_q8_0 *)(a->v + kern_attn_q8_row(a, t));
        for (int b = 0; b < nb; b++) {
            const float dv = quant_f16_to_f32(vb[b].d);
            /* (float)q * dv is exact: 11 significant bits times 8 */
            for (int i = 0; i < 32; i++) acc[32 * b + i] = fmaf((float)vb[b].qs[i] * dv, w[t], acc[32 * b + i]);
        }
    }
    const float inv = kern_attn_inv(S, M, a->sink);
    for (int d = 0; d < hd; d++) a->out[d] = acc[d] * inv;
}

static void attn_q8_ref(const kern_attn_q8 *a) {
    for (int u = 0; u < a->nt; u++)
        for (int j = 0; j < a->nq; j++) {
            const kern_attn_q8 one = kern_attn_q8_query(a, u, j);
            attn_q8_one(&one);
        }
}

static void rope_neox_ref(const float *cs, float *x, int n_heads, int head_dim, int n_rot) {
    kern_rope r;
    memset(&r, 0, sizeof r);
    r.n_rot = n_rot;
    r.neox = 1;
    kern_rope_apply(&r, cs, x, n_heads, head_dim);
}

const kern_ops kern_ops_scalar = {
    .attn_f16 = attn_f16_ref,
    .attn_q8 = attn_q8_ref,
    .f32_to_f16_row = kern_f32_to_f16_row,
    .round_f16_row = kern_round_f16_row,
    .rmsnorm = kern_rmsnorm,
    .swiglu = kern_swiglu,
    .add = kern_add,
    .rope_neox = rope_neox_ref,
};
