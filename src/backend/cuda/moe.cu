/*
 * moe.cu — the mixture-of-experts pieces around the experts' products
 * (which are matvec.cu's and gemm.cu's kernels, one launch per expert over
 * its rows), and the other activations.  All F32.  Scalar twins
 * (src/kernels/ssm.c, ops.c, backend/cpu_moe.c): kern_moe_route,
 * kern_moe_route_sel and cpu_moe.c's top-k softmax (routing, the same
 * serial order: bit-equal), the per-token weighted sum of backend_cpu_moe_ffn,
 * kern_swiglu_oai, kern_gelu, relu(x)^2.
 */
#include "kcu.cuh"
#include "shapes.h"

/* Routing of n tokens over n_expert router logits each ([n][n_expert],
 * rows n_expert apart; the general form turns them into probabilities in
 * place), one thread per token doing what the CPU does for one:
 *   mode 0: softmax over all, the k largest logits (ties to the lower id),
 *           renormalized when norm, times scale (kern_moe_route);
 *   mode 1: the k largest logits, a softmax over just those, times scale
 *           (BACKEND_MOE_TOPK_SOFTMAX);
 *   mode 2: kern_moe_route_sel: sigmoid (sig) or softmax, chosen by p +
 *           bias (bias NULL: p) within the best n_group_used of n_group
 *           groups (n_group <= 256), weights p renormalized and scaled.
 * sel [n][n_expert] scratch (mode 2); ids, w [n][k].  1-D grid, any
 * blockDim.x. */
KCU_KERNEL void kcu_moe_route(float *logits, float *sel, int32_t *ids, float *w, int n, int n_expert, int k, int mode,
                              int norm, float scale, int sig, const float *bias, int n_group, int n_group_used) {
    const int t = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (t >= n) return;
    float *lg = logits + (int64_t)t * n_expert;
    int32_t *id = ids + (int64_t)t * k;
    float *wt = w + (int64_t)t * k;
    const float *key = lg; /* what the experts are chosen by */
    float mx = -INFINITY, inv = 1.0f;
    if (mode == 0) {
        for (int e = 0; e < n_expert; e++) mx = lg[e] > mx ? lg[e] : mx;
        double sum = 0.0;
        for (int e = 0; e < n_expert; e++) sum += kcu_expf(lg[e] - mx);
        inv = (float)(1.0 / sum);
    } else if (mode == 2) {
        if (sig) {
            for (int e = 0; e < n_expert; e++) lg[e] = 1.0f / (1.0f + kcu_expf(-lg[e]));
        } else {
            for (int e = 0; e < n_expert; e++) mx = lg[e] > mx ? lg[e] : mx;
            double sum = 0.0;
            for (int e = 0; e < n_expert; e++) sum += kcu_expf(lg[e] - mx);
            const float iv = (float)(1.0 / sum);
            for (int e = 0; e < n_expert; e++) lg[e] = kcu_expf(lg[e] - mx) * iv;
        }
        float *s = sel + (int64_t)t * n_expert;
        for (int e = 0; e < n_expert; e++) s[e] = bias ? lg[e] + bias[e] : lg[e];
        if (n_group > 1 && n_group_used < n_group) {
            const int per = n_expert / n_group;
            float score[256];
            uint8_t keep[256];
            for (int q = 0; q < n_group; q++) {
                float a = -INFINITY, b = -INFINITY;
                for (int e = q * per; e < (q + 1) * per; e++) {
                    if (s[e] > a) {
                        b = a;
                        a = s[e];
                    } else if (s[e] > b) {
                        b = s[e];
                    }
                }
                score[q] = per > 1 ? a + b : a;
                keep[q] = 0;
            }
            for (int i = 0; i < n_group_used; i++) {
                int best = -1;
                for (int q = 0; q < n_group; q++)
                    if (!keep[q] && (best < 0 || score[q] > score[best])) best = q;
                keep[best] = 1;
            }
            for (int e = 0; e < n_expert; e++)
                if (!keep[e / per]) s[e] = -INFINITY;
        }
        key = s;
    }
    for (int i = 0; i < k; i++) { /* k passes, ties to the lower id */
        int best = -1;
        for (int e = 0; e < n_expert; e++) {
            int taken = 0;
            for (int j = 0; j < i && !taken; j++) taken = id[j] == e;
            if (!taken && (best < 0 || key[e] > key[best])) best = e;
        }
        id[i] = best;
        if (mode == 0) wt[i] = kcu_expf(lg[best] - mx) * inv;
        if (mode == 2) wt[i] = lg[best];
    }
    if (mode == 1) {
        const float m1 = lg[id[0]];
        double sum = 0.0;
        for (int i = 0; i < k; i++) sum += (wt[i] = kcu_expf(lg[id[i]] - m1));
        const float iv = (float)(1.0 / sum);
        for (int i = 0; i < k; i++) wt[i] *= iv;
    } else if (norm) {
        float s = 0.0f;
        for (int i = 0; i < k; i++) s += wt[i];
        if (s < 6.103515625e-5f) s = 6.103515625e-5f;
        for (int i = 0; i < k; i++) wt[i] /= s;
    }
    if (scale != 1.0f && scale != 0.0f)
        for (int i = 0; i < k; i++) wt[i] *= scale;
}

/* dst row r = src row idx[r], rows of n (dst rows n apart, src rows
 * src_stride apart).  grid.x = rows, any blockDim.x. */
KCU_KERNEL void kcu_gather_rows(float *dst, const float *src, int64_t src_stride, const int32_t *idx, int n) {
    const float *s = src + (int64_t)idx[blockIdx.x] * src_stride;
    float *d = dst + (int64_t)blockIdx.x * n;
    for (int i = (int)threadIdx.x; i < n; i += (int)blockDim.x) d[i] = s[i];
}

/* y [rows][n] += b [n] on every row.  1-D grid of any shape. */
KCU_KERNEL void kcu_add_rows(float *y, const float *b, int rows, int n) {
    const int64_t total = (int64_t)rows * n, step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) y[i] += b[i % n];
}

/* Per token t, the weighted sum of its k experts' rows (md [.][n], row
 * row_of[t * k + s] for slot s, weight w[t * k + s]) in slot order, then
 * y[t] = that + y[t] * sigmoid(sgl[t]) (shared: y holds the shared
 * expert's output; sgl NULL: a weight of 1), else y[t] = that.  y [T][n].
 * grid = (ceil(n / blockDim.x), T). */
KCU_KERNEL void kcu_moe_combine(const float *md, const int32_t *row_of, const float *w, int k, const float *sgl,
                                int shared, float *y, int n) {
    const int t = (int)blockIdx.y, i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i >= n) return;
    float acc = 0.0f;
    for (int s = 0; s < k; s++) {
        const float d = md[(int64_t)row_of[(int64_t)t * k + s] * n + i] * w[(int64_t)t * k + s];
        acc = s == 0 ? d : acc + d;
    }
    float *yt = y + (int64_t)t * n;
    if (shared) {
        const float g = sgl ? 1.0f / (1.0f + kcu_expf(-sgl[t])) : 1.0f;
        yt[i] = acc + yt[i] * g;
    } else {
        yt[i] = acc;
    }
}

/* The clamped SwiGLU over n: x = min(g, limit), y = clamp(u, -limit,
 * limit), g = x * sigmoid(alpha x) * (y + 1).  1-D grid of any shape. */
KCU_KERNEL void kcu_swiglu_oai(float *g, const float *u, int64_t n, float alpha, float limit) {
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        const float x = g[i] < limit ? g[i] : limit;
        const float y = u[i] < -limit ? -limit : u[i] > limit ? limit : u[i];
        g[i] = x / (1.0f + kcu_expf(alpha * -x)) * (y + 1.0f);
    }
}

/* x = relu(x)^2 over n.  1-D grid of any shape. */
KCU_KERNEL void kcu_relu_sq(float *x, int64_t n) {
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        const float r = x[i] > 0.0f ? x[i] : 0.0f;
        x[i] = r * r;
    }
}

/* x = gelu(x), the tanh approximation, over n.  1-D grid of any shape. */
KCU_KERNEL void kcu_gelu(float *x, int64_t n) {
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    const float c = 0.7978845608028654f; /* sqrt(2/pi) */
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        const float v = x[i];
        x[i] = 0.5f * v * (1.0f + tanhf(c * (v + 0.044715f * v * v * v)));
    }
}
