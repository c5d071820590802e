/*
 * gdn.cu — the Gated DeltaNet core of the recurrent layers (backend.h,
 * backend_gdn), all F32.  Scalar twins (src/kernels/ssm.h, backend/cpu_gdn.c):
 * kern_sigmoid and kern_softplus (gates), the conv_silu reference (causal
 * convolution), kern_l2norm, kern_rmsnorm_gated and the gdn_step reference
 * (the delta rule in its recurrent form, token after token; prefill too,
 * where the CPU takes the chunked form, which is the same recurrence
 * within float rounding).
 */
#include "kcu.cuh"
#include "shapes.h"

/* Per token and value head v (Hv of them): beta = sigmoid(b), gd =
 * softplus(a + dt_bias[v]) * ssm_a[v], b and a read from ba [n][2 Hv]:
 * grouped (per key head as [beta x r, alpha x r], r = Hv / Hk) or as
 * [beta x Hv | alpha x Hv].  beta, gd [n][Hv].  1-D grid of any shape. */
KCU_KERNEL void kcu_gdn_gates(const float *ba, const float *dt_bias, const float *ssm_a, float *beta, float *gd, int n,
                              int Hv, int Hk, int grouped) {
    const int64_t total = (int64_t)n * Hv, step = (int64_t)gridDim.x * blockDim.x;
    const int r = Hv / Hk;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
        const int t = (int)(i / Hv), v = (int)(i % Hv);
        const float *row = ba + (int64_t)t * 2 * Hv;
        float b, al;
        if (grouped) {
            b = row[(v / r) * 2 * r + v % r];
            al = row[(v / r) * 2 * r + r + v % r];
        } else {
            b = row[v];
            al = row[Hv + v];
        }
        const float x = al + dt_bias[v];
        beta[i] = 1.0f / (1.0f + kcu_expf(-b));
        gd[i] = (x > 20.0f ? x : logf(1.0f + kcu_expf(x))) * ssm_a[v];
    }
}

/* Causal depthwise convolution of K taps (K <= KCU_CONV_MAXK) over n
 * tokens of C channels, then SiLU: y[t][c] = silu(sum_k w[k][c] * in[t +
 * k][c]) with in the K - 1 rows of state followed by x, taps summed in
 * order from 0.  x [n] rows ldx floats apart, w [K][C], state [K - 1][C]
 * (oldest first; on return the last K - 1 inputs), y [n][C].  One thread
 * per channel: grid.x = ceil(C / blockDim.x), any blockDim.x. */
KCU_KERNEL void kcu_conv_silu(const float *x, int64_t ldx, const float *w, float *state, float *y, int n, int C,
                              int K) {
    const int c = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (c >= C) return;
    /* the window right-aligned in win[KCU_CONV_MAXK - K ..]: loops over
     * the fixed bound keep it in registers */
    const int k0 = KCU_CONV_MAXK - K;
    float win[KCU_CONV_MAXK], wt[KCU_CONV_MAXK];
    for (int k = 0; k < KCU_CONV_MAXK; k++) {
        wt[k] = k >= k0 ? w[(int64_t)(k - k0) * C + c] : 0.0f;
        win[k] = k >= k0 && k < KCU_CONV_MAXK - 1 ? state[(int64_t)(k - k0) * C + c] : 0.0f;
    }
    for (int t = 0; t < n; t++) {
        win[KCU_CONV_MAXK - 1] = x[(int64_t)t * ldx + c];
        float acc = 0.0f;
        for (int k = 0; k < KCU_CONV_MAXK; k++)
            if (k >= k0) acc += win[k] * wt[k];
        y[(int64_t)t * C + c] = acc / (1.0f + kcu_expf(-acc));
        for (int k = 0; k < KCU_CONV_MAXK - 1; k++) win[k] = win[k + 1];
    }
    for (int k = 0; k < KCU_CONV_MAXK - 1; k++)
        if (k >= k0) state[(int64_t)(k - k0) * C + c] = win[k];
}

/* In place, each row of n: x = x / max(||x||, eps), the squares summed in
 * double (per thread, then the threads' sums in order).  Row (i, j) at x +
 * i * tok_stride + j * n: grid = (tokens, rows per token), blockDim.x at
 * most 256. */
KCU_KERNEL void kcu_l2norm(float *x, int64_t tok_stride, int n, float eps) {
    __shared__ double red[256];
    float *v = x + (int64_t)blockIdx.x * tok_stride + (int64_t)blockIdx.y * n;
    double ss = 0.0;
    for (int i = (int)threadIdx.x; i < n; i += (int)blockDim.x) ss += (double)v[i] * v[i];
    red[threadIdx.x] = ss;
    kcu_sync();
    if (threadIdx.x == 0) {
        double s = 0.0;
        for (int i = 0; i < (int)blockDim.x; i++) s += red[i];
        red[0] = s;
    }
    kcu_sync();
    const float scale = 1.0f / fmaxf(sqrtf((float)red[0]), eps);
    for (int i = (int)threadIdx.x; i < n; i += (int)blockDim.x) v[i] *= scale;
}

/* The output norm of each row of n: o = rms(o) * w * silu(z), the squares
 * summed in double as kcu_l2norm's.  o, z [rows][n]; grid.x = rows,
 * blockDim.x at most 256. */
KCU_KERNEL void kcu_rmsnorm_gated(float *o, const float *z, const float *w, int n, float eps) {
    __shared__ double red[256];
    float *v = o + (int64_t)blockIdx.x * n;
    const float *zr = z + (int64_t)blockIdx.x * n;
    double ss = 0.0;
    for (int i = (int)threadIdx.x; i < n; i += (int)blockDim.x) ss += (double)v[i] * v[i];
    red[threadIdx.x] = ss;
    kcu_sync();
    if (threadIdx.x == 0) {
        double s = 0.0;
        for (int i = 0; i < (int)blockDim.x; i++) s += red[i];
        red[0] = s;
    }
    kcu_sync();
    const float scale = 1.0f / sqrtf((float)(red[0] / n) + eps);
    for (int i = (int)threadIdx.x; i < n; i += (int)blockDim.x)
        v[i] = v[i] * scale * w[i] * (zr[i] / (1.0f + kcu_expf(-zr[i])));
}

/* The gated delta rule, recurrent form, over n tokens for every value
 * head at once.  One warp per state row: row j of head h (S_h [dv][dk],
 * state + h * dv * dk) stays in the lanes' registers (dk / 32 each) from
 * token to token:
 *   row *= e^g;  d = (v[j] - row . k) * beta;  row += d k;  o[j] = scale row . q
 * Token t's q and k heads are L2-normalized rows of dk at qk + t * ld_qk +
 * kh * dk (q) and + (Hk + kh) * dk (k), kh = h / (Hv / Hk) when grouped
 * else h mod Hk; its v at v + t * ld_v + h * dv; g and beta at g[t * ld_gb
 * + h], beta[t * ld_gb + h]; o [n] rows ld_o apart, head h at h * dv (o
 * NULL: outputs dropped).  dk <= KCU_GDN_MAXD.
 * grid = (ceil(dv / KCU_GDN_WARPS), Hv), blockDim.x = 32 * KCU_GDN_WARPS. */
KCU_KERNEL void kcu_gdn_rec(const float *qk, int64_t ld_qk, const float *v, int64_t ld_v, const float *g,
                            const float *beta, int64_t ld_gb, float *state, float *o, int64_t ld_o, int n, int Hk,
                            int Hv, int dk, int dv, int grouped, float scale) {
    const int lane = kcu_lane(), h = (int)blockIdx.y;
    const int j = (int)blockIdx.x * KCU_GDN_WARPS + (int)(threadIdx.x >> 5);
    if (j >= dv) return; /* whole warps leave together */
    const int kh = grouped ? h / (Hv / Hk) : h % Hk;
    float *row = state + ((int64_t)h * dv + j) * dk;
    /* element lane + 32 i of the row in s[i]; loops over the fixed bound
     * so that s stays in registers, elements past dk held at 0 */
    float s[KCU_GDN_MAXD / 32];
#define KCU_GDN_EACH for (int i = 0, e = lane; i < KCU_GDN_MAXD / 32; i++, e += 32)
    KCU_GDN_EACH s[i] = e < dk ? row[e] : 0.0f;
    for (int t = 0; t < n; t++) {
        const float *q = qk + (int64_t)t * ld_qk + (int64_t)kh * dk;
        const float *k = qk + (int64_t)t * ld_qk + (int64_t)(Hk + kh) * dk;
        const float decay = kcu_expf(g[(int64_t)t * ld_gb + h]), b = beta[(int64_t)t * ld_gb + h];
        float kr[KCU_GDN_MAXD / 32];
        float sk = 0.0f;
        KCU_GDN_EACH {
            kr[i] = e < dk ? k[e] : 0.0f;
            s[i] *= decay;
            sk += s[i] * kr[i];
        }
        sk = kcu_warp_sum(sk);
        const float d = (v[(int64_t)t * ld_v + (int64_t)h * dv + j] - sk) * b;
        float sq = 0.0f;
        KCU_GDN_EACH {
            s[i] += d * kr[i];
            sq += e < dk ? s[i] * q[e] : 0.0f;
        }
        sq = kcu_warp_sum(sq);
        if (o && lane == 0) o[(int64_t)t * ld_o + (int64_t)h * dv + j] = sq * scale;
    }
    KCU_GDN_EACH if (e < dk) row[e] = s[i];
#undef KCU_GDN_EACH
}

/* att *= sigmoid(gate) over n tokens of n_head heads of hd: the gate of
 * head h of token t is the second hd of qg + t * 2 * n_head * hd + h * 2 *
 * hd (backend_qk.qg).  1-D grid of any shape. */
KCU_KERNEL void kcu_attn_gate(float *att, const float *qg, int n, int n_head, int hd) {
    const int64_t total = (int64_t)n * n_head * hd, step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
        const int64_t th = i / hd; /* token * n_head + head */
        const float gate = qg[th * 2 * hd + hd + i % hd];
        att[i] *= 1.0f / (1.0f + kcu_expf(-gate));
    }
}
