/*
 * ops.cu — the small kernels of the forward pass.  All activations F32.
 * Scalar twins (src/kernels/ops.h, src/quant): kern_rmsnorm, kern_rope_table +
 * kern_rope_apply, kern_swiglu, kern_add, the types' to_f32 (get_rows),
 * quant_f32_to_f16 (kv_write), and a first-maximum loop (argmax).
 */
#include "quant.cuh"

/* out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w  (w NULL: no scale).
 * x [rows][n] rows x_stride floats apart, out alike (out may be x).
 * grid.x = rows, blockDim.x a multiple of 32 (256 suits n >= 1024). */
KCU_KERNEL void kcu_rmsnorm(const float *x, int64_t x_stride, const float *w, float *out, int64_t out_stride, int n,
                            float eps) {
    __shared__ float red[32];
    const float *xr = x + (int64_t)blockIdx.x * x_stride;
    float *orow = out + (int64_t)blockIdx.x * out_stride;
    float ss = 0.0f;
    for (int i = (int)threadIdx.x; i < n; i += (int)blockDim.x) ss += xr[i] * xr[i];
    ss = kcu_block_sum(ss, red);
    const float s = kcu_rsqrtf(ss / (float)n + eps);
    for (int i = (int)threadIdx.x; i < n; i += (int)blockDim.x) orow[i] = w ? xr[i] * s * w[i] : xr[i] * s;
}

/* RoPE in place on x [n_tok][n_head][head_dim] (tokens tok_stride floats
 * apart, heads head_dim apart), token t at position pos[t].  Pair i (i <
 * n_rot / 2) is (2i, 2i+1), or (i, i + n_rot/2) when neox; its angle is
 * pos * inv_freq[i] (the host folds the base, the frequency scale and any
 * frequency factors into inv_freq), and both cos and sin are multiplied by
 * mscale.  Dimensions from n_rot on are left as they are.
 * grid = (n_tok, n_head), any blockDim.x. */
KCU_KERNEL void kcu_rope(float *x, int64_t tok_stride, int head_dim, int n_rot, int neox, const int32_t *pos,
                         const float *inv_freq, float mscale) {
    float *v = x + (int64_t)blockIdx.x * tok_stride + (int64_t)blockIdx.y * head_dim;
    const int half = n_rot / 2;
    const float p = (float)pos[blockIdx.x];
    for (int i = (int)threadIdx.x; i < half; i += (int)blockDim.x) {
        const float theta = p * inv_freq[i];
        const float c = cosf(theta) * mscale, s = sinf(theta) * mscale;
        const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * c - x1 * s;
        v[b] = x0 * s + x1 * c;
    }
}

/* g = silu(g) * u over n elements, silu(v) = v / (1 + e^-v).  1-D grid of
 * any shape (grid-stride loop). */
KCU_KERNEL void kcu_swiglu(float *g, const float *u, int64_t n) {
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        const float v = g[i];
        g[i] = v / (1.0f + kcu_expf(-v)) * u[i];
    }
}

/* y += x over n elements (grid-stride). */
KCU_KERNEL void kcu_add(float *y, const float *x, int64_t n) {
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) y[i] += x[i];
}

/* out[i] = row ids[i] of w [rows][n] (type T, rows w_stride bytes apart)
 * as F32, out rows out_stride floats apart.  grid.x = number of ids, any
 * blockDim.x.  n a multiple of the type's block size. */
template <int T>
KCU_DEV void kcu_get_rows(const uint8_t *w, int64_t w_stride, const int32_t *ids, float *out, int64_t out_stride,
                          int n) {
    const uint8_t *row = w + (int64_t)ids[blockIdx.x] * w_stride;
    float *o = out + (int64_t)blockIdx.x * out_stride;
    for (int e = (int)threadIdx.x * 8; e < n; e += (int)blockDim.x * 8) {
        float q[8];
        kcu_deq8<T>(row, e, n, q);
        for (int i = 0; i < 8 && e + i < n; i++) o[e + i] = q[i];
    }
}

#define KCU_GET_ROWS(name, T)                                                                                    \
    KCU_KERNEL void name(const uint8_t *w, int64_t w_stride, const int32_t *ids, float *out, int64_t out_stride, \
                         int n) {                                                                                \
        kcu_get_rows<T>(w, w_stride, ids, out, out_stride, n);                                                   \
    }

KCU_GET_ROWS(kcu_get_rows_f32, KCU_F32)
KCU_GET_ROWS(kcu_get_rows_f16, KCU_F16)
KCU_GET_ROWS(kcu_get_rows_bf16, KCU_BF16)
KCU_GET_ROWS(kcu_get_rows_q4_0, KCU_Q4_0)
KCU_GET_ROWS(kcu_get_rows_q8_0, KCU_Q8_0)
KCU_GET_ROWS(kcu_get_rows_q4_1, KCU_Q4_1)
KCU_GET_ROWS(kcu_get_rows_q5_0, KCU_Q5_0)
KCU_GET_ROWS(kcu_get_rows_q5_1, KCU_Q5_1)
KCU_GET_ROWS(kcu_get_rows_iq4_nl, KCU_IQ4_NL)
KCU_GET_ROWS(kcu_get_rows_q2_k, KCU_Q2_K)
KCU_GET_ROWS(kcu_get_rows_q3_k, KCU_Q3_K)
KCU_GET_ROWS(kcu_get_rows_iq4_xs, KCU_IQ4_XS)
KCU_GET_ROWS(kcu_get_rows_q4_k, KCU_Q4_K)
KCU_GET_ROWS(kcu_get_rows_q5_k, KCU_Q5_K)
KCU_GET_ROWS(kcu_get_rows_q6_k, KCU_Q6_K)

/* out[r] = the index of the largest of x[r][0..n) (the first of equal
 * ones), rows x_stride floats apart.  grid.x = rows, blockDim.x a multiple
 * of 32, at most 1024. */
KCU_KERNEL void kcu_argmax(const float *x, int64_t x_stride, int n, int32_t *out) {
    __shared__ float best_v[32];
    __shared__ int best_i[32];
    const float *xr = x + (int64_t)blockIdx.x * x_stride;
    float bv = -INFINITY;
    int bi = 0x7fffffff;
    for (int i = (int)threadIdx.x; i < n; i += (int)blockDim.x) {
        if (xr[i] > bv) {
            bv = xr[i];
            bi = i;
        }
    }
    for (int pass = 0; pass < 2; pass++) {
        for (int m = 16; m > 0; m >>= 1) {
            const float ov = kcu_shfl_xor(bv, m);
            const int oi = kcu_shfl_xor_i(bi, m);
            if (ov > bv || (ov == bv && oi < bi)) {
                bv = ov;
                bi = oi;
            }
        }
        if (pass == 1) break;
        const int lane = kcu_lane(), warp = (int)(threadIdx.x >> 5);
        if (lane == 0) {
            best_v[warp] = bv;
            best_i[warp] = bi;
        }
        kcu_sync();
        const int nw = (int)(blockDim.x >> 5);
        bv = lane < nw ? best_v[lane] : -INFINITY;
        bi = lane < nw ? best_i[lane] : 0x7fffffff;
    }
    if (threadIdx.x == 0) out[blockIdx.x] = bi == 0x7fffffff ? 0 : bi;
}

/* Rows of new keys or values into a paged F16 cache: src [n_tok][n] F32
 * (rows src_stride floats apart) goes to cache + cell[t] * cell_stride +
 * offset, rounded to nearest even.  grid.x = n_tok, any blockDim.x. */
KCU_KERNEL void kcu_kv_write(const float *src, int64_t src_stride, uint16_t *cache, int64_t cell_stride, int64_t offset,
                             const int32_t *cell, int n) {
    const float *s = src + (int64_t)blockIdx.x * src_stride;
    uint16_t *d = cache + (int64_t)cell[blockIdx.x] * cell_stride + offset;
    for (int i = (int)threadIdx.x; i < n; i += (int)blockDim.x) d[i] = kcu_f2h(s[i]);
}

/* Rows of new keys or values into a paged Q8_0 cache: src [n_tok][n] F32
 * (rows src_stride floats apart, n a multiple of 32) goes to cache +
 * cell[t] * cell_stride + offset (bytes) as n / 32 blocks of 34 bytes by
 * the reference quantizer (kq Q8_0's from_f32: scale amax / 127 as F16,
 * values x / scale rounded), one thread per block.  grid.x = n_tok, any
 * blockDim.x. */
KCU_KERNEL void kcu_kv_write_q8(const float *src, int64_t src_stride, uint8_t *cache, int64_t cell_stride,
                                int64_t offset, const int32_t *cell, int n) {
    const float *s = src + (int64_t)blockIdx.x * src_stride;
    uint8_t *d = cache + (int64_t)cell[blockIdx.x] * cell_stride + offset;
    for (int b = (int)threadIdx.x; b < n / 32; b += (int)blockDim.x) {
        const float *x = s + b * 32;
        uint8_t *o = d + b * 34;
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[i]));
        const float sc = amax / 127.0f, id = sc != 0.0f ? 1.0f / sc : 0.0f;
        const uint16_t h = kcu_f2h(sc);
        o[0] = (uint8_t)(h & 0xff);
        o[1] = (uint8_t)(h >> 8);
        for (int i = 0; i < 32; i++) o[2 + i] = (uint8_t)(int8_t)roundf(x[i] * id);
    }
}
