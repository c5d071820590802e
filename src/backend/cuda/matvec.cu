/*
 * matvec.cu — y = W x for decode: W [n_rows][n] in a GGUF weight type as
 * stored, x up to KCU_MV_MAXV F32 activation vectors [n_vec][n], y
 * [n_vec][n_rows].  One warp per weight row: each lane dequantizes chunks
 * of 8 elements (quant.cuh) 256 elements apart and dots them with every
 * vector, then the warp sums its lanes.  Block: KCU_MV_WARPS warps (one row
 * each); grid.x = ceil(n_rows / KCU_MV_WARPS).  n must be a multiple of the
 * type's block size (any n for F16/BF16/F32).  The scalar twin: each row
 * dequantized by the type's to_f32 (src/quant) and dotted with x.
 */
#include "quant.cuh"
#include "shapes.h"

template <int T>
KCU_DEV void kcu_matvec(const uint8_t *w, int64_t w_stride, const float *x, int64_t x_stride, float *y,
                        int64_t y_stride, int n_rows, int n, int n_vec) {
    const int lane = kcu_lane();
    const int r = (int)blockIdx.x * KCU_MV_WARPS + (int)(threadIdx.x >> 5);
    if (r >= n_rows) return; /* whole warps leave together */
    const uint8_t *row = w + (int64_t)r * w_stride;
    /* whole 8-element chunks of x in two 16-byte loads when every vector's
     * chunks are 16-byte aligned (the same answer for the whole launch) */
    const int x_al = ((uintptr_t)x & 15) == 0 && (x_stride & 3) == 0;
    float acc[KCU_MV_MAXV];
    for (int v = 0; v < KCU_MV_MAXV; v++) acc[v] = 0.0f;
    for (int e = lane * 8; e < n; e += 256) {
        float q[8];
        kcu_deq8<T>(row, e, n, q);
        for (int v = 0; v < KCU_MV_MAXV; v++) {
            if (v >= n_vec) break;
            const float *xv = x + (int64_t)v * x_stride + e;
            float s = 0.0f;
            if (e + 8 <= n && x_al) {
                float xa[8];
                kcu_ld8f(xv, xa);
                for (int i = 0; i < 8; i++) s += q[i] * xa[i];
            } else if (e + 8 <= n) {
                for (int i = 0; i < 8; i++) s += q[i] * xv[i];
            } else {
                for (int i = 0; i < 8 && e + i < n; i++) s += q[i] * xv[i];
            }
            acc[v] += s;
        }
    }
    for (int v = 0; v < KCU_MV_MAXV; v++) {
        if (v >= n_vec) break;
        const float s = kcu_warp_sum(acc[v]);
        if (lane == 0) y[(int64_t)v * y_stride + r] = s;
    }
}

#define KCU_MATVEC(name, T)                                                                              \
    KCU_KERNEL void name(const uint8_t *w, int64_t w_stride, const float *x, int64_t x_stride, float *y, \
                         int64_t y_stride, int n_rows, int n, int n_vec) {                               \
        kcu_matvec<T>(w, w_stride, x, x_stride, y, y_stride, n_rows, n, n_vec);                          \
    }

KCU_MATVEC(kcu_matvec_f32, KCU_F32)
KCU_MATVEC(kcu_matvec_f16, KCU_F16)
KCU_MATVEC(kcu_matvec_bf16, KCU_BF16)
KCU_MATVEC(kcu_matvec_q4_0, KCU_Q4_0)
KCU_MATVEC(kcu_matvec_q8_0, KCU_Q8_0)
KCU_MATVEC(kcu_matvec_q4_1, KCU_Q4_1)
KCU_MATVEC(kcu_matvec_q5_0, KCU_Q5_0)
KCU_MATVEC(kcu_matvec_q5_1, KCU_Q5_1)
KCU_MATVEC(kcu_matvec_iq4_nl, KCU_IQ4_NL)
KCU_MATVEC(kcu_matvec_q2_k, KCU_Q2_K)
KCU_MATVEC(kcu_matvec_q3_k, KCU_Q3_K)
KCU_MATVEC(kcu_matvec_iq4_xs, KCU_IQ4_XS)
KCU_MATVEC(kcu_matvec_q4_k, KCU_Q4_K)
KCU_MATVEC(kcu_matvec_q5_k, KCU_Q5_K)
KCU_MATVEC(kcu_matvec_q6_k, KCU_Q6_K)
